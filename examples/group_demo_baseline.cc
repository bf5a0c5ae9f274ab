#include "examples/group_demo_baseline.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "codec/base/file_io.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast::demo {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Result<BaselineTimes> measure_full_safetensors_baseline(const std::string& journal_root,
                                                        const std::string& work_dir) {
  const JournalLayout layout(journal_root);
  ASSIGN_OR_RETURN(proto::JournalHead head, read_head_file(layout.head()));
  ASSIGN_OR_RETURN(proto::StepManifest anchor,
                   read_manifest_file(layout.manifest(head.anchor_version())));
  std::vector<std::vector<uint8_t>> shards;
  BaselineTimes t;
  for (const auto& part : anchor.parts()) {
    ASSIGN_OR_RETURN(auto bytes,
                     read_whole_file(layout.step(head.anchor_version()) + "/" + part.file()));
    t.bytes += bytes.size();
    shards.push_back(std::move(bytes));
  }
  const std::string path = work_dir + "/baseline-model.safetensors";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return io_error("cannot create " + path);
  auto start = std::chrono::steady_clock::now();
  for (const auto& s : shards) {
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
      if (n <= 0) {
        ::close(fd);
        return io_error("write to " + path + " failed");
      }
      done += static_cast<size_t>(n);
    }
  }
  ::fsync(fd);
  t.write_s = seconds_since(start);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  shards.clear();

  start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto back, read_whole_file(path));
  t.read_s = seconds_since(start);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (back.size() != t.bytes) return data_loss("read back " + path + " short");
  return t;
}

}  // namespace weightcast::demo
