#include "transport/fs/fs_transport.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "transport/fs/delta_step.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace {

Status check_deadline(Deadline deadline, const std::string& what) {
  if (std::chrono::steady_clock::now() > deadline) {
    return deadline_exceeded(what + ": deadline passed");
  }
  return ok_status();
}

// A root that exists must be a directory; one that does not is made by the first publish.
Status check_root(const std::string& root) {
  struct stat st {};
  if (::stat(root.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return failed_precondition("fs transport: '" + root + "' is not a directory");
  }
  return ok_status();
}

TransportInfo fs_info() {
  TransportInfo info;
  info.name = "fs";
  info.memory_kinds = {MemoryKind::kHost, MemoryKind::kHostPinned};
  info.durable = true;
  return info;
}

}  // namespace

Result<std::unique_ptr<FsPartPublisher>> FsPartPublisher::create(FsTransportOptions options) {
  RETURN_IF_ERROR(check_root(options.root));
  return std::unique_ptr<FsPartPublisher>(new FsPartPublisher(std::move(options)));
}

FsPartPublisher::FsPartPublisher(FsTransportOptions options)
    : options_(std::move(options)), layout_(options_.root) {}

TransportInfo FsPartPublisher::info() const {
  return fs_info();
}

Status FsPartPublisher::publish(uint64_t version, std::span<const PartPayload> parts,
                                Deadline deadline) {
  RETURN_IF_ERROR(sticky_.check());
  return sticky_.record(publish_unchecked(version, parts, deadline));
}

Status FsPartPublisher::publish_unchecked(uint64_t version, std::span<const PartPayload> parts,
                                          Deadline deadline) {
  const std::string what =
      "fs transport '" + options_.root + "' version " + std::to_string(version);
  RETURN_IF_ERROR(check_deadline(deadline, what));
  std::set<std::string> names;
  for (const auto& p : parts) {
    if (!is_safe_part_file_name(p.name) || p.name == "MANIFEST" || !names.insert(p.name).second) {
      return invalid_argument(what + ": part name '" + p.name +
                              "' is unsafe, reserved or repeated");
    }
  }
  if (!lock_) {
    ASSIGN_OR_RETURN(auto lock, JournalLock::acquire(layout_));
    lock_.emplace(std::move(lock));
  }
  ASSIGN_OR_RETURN(auto head, read_journal_head(layout_));
  if (head && version <= head->version()) {
    return failed_precondition(what + " is not newer than the latest " +
                               std::to_string(head->version()));
  }
  ASSIGN_OR_RETURN(const std::string staged, create_staging_dir(layout_, version));
  proto::StepManifest manifest;
  manifest.set_format_version(kJournalFormatVersion);
  manifest.set_version(version);
  manifest.set_kind(proto::STEP_PARTS);
  manifest.set_created_unix_ms(unix_now_ms());
  manifest.set_journal_id(lock_->journal_id());
  for (const auto& p : parts) {
    Status s = check_deadline(deadline, what);
    if (s.ok()) s = write_and_sync_file(staged + "/" + p.name, p.bytes, options_.before_write);
    if (!s.ok()) {
      (void)remove_tree(staged);
      return s;
    }
    proto::PartInfo* info = manifest.add_parts();
    info->set_file(p.name);
    info->set_bytes(p.bytes.size());
    info->set_raw_bytes(p.bytes.size());
    info->set_xxh3(XXH3_64bits(p.bytes.data(), p.bytes.size()));
  }
  Status s = commit_step(layout_, staged, manifest);
  if (!s.ok()) (void)remove_tree(staged);
  return s;
}

Result<std::unique_ptr<FsPartReader>> FsPartReader::create(FsTransportOptions options) {
  RETURN_IF_ERROR(check_root(options.root));
  return std::unique_ptr<FsPartReader>(new FsPartReader(std::move(options)));
}

FsPartReader::FsPartReader(FsTransportOptions options)
    : options_(std::move(options)), layout_(options_.root) {}

TransportInfo FsPartReader::info() const {
  return fs_info();
}

Result<VersionDescriptor> FsPartReader::latest(Deadline deadline) {
  RETURN_IF_ERROR(sticky_.check());
  RETURN_IF_ERROR(check_deadline(deadline, "fs transport '" + options_.root + "'"));
  auto head = read_journal_head(layout_);
  if (!head.ok()) return sticky_.record(head.status());
  if (!*head) return not_found("fs transport '" + options_.root + "' has no version yet");
  return describe((*head)->version(), deadline);
}

Result<VersionDescriptor> FsPartReader::describe(uint64_t version, Deadline deadline) {
  RETURN_IF_ERROR(sticky_.check());
  const std::string what =
      "fs transport '" + options_.root + "' version " + std::to_string(version);
  RETURN_IF_ERROR(check_deadline(deadline, what));
  ASSIGN_OR_RETURN(auto head, read_journal_head(layout_));
  if (!head || version > head->version()) return not_found(what + " is not published");
  ASSIGN_OR_RETURN(auto manifest, read_manifest_file(layout_.manifest(version)));
  if (manifest.kind() != proto::STEP_PARTS) {
    return failed_precondition(what + " is a journal step, not a parts step");
  }
  VersionDescriptor d;
  d.version = version;
  for (const auto& p : manifest.parts()) d.parts.push_back({p.file(), p.bytes(), p.xxh3()});
  return d;
}

Status FsPartReader::fetch(uint64_t version, const PartDescriptor& part, std::span<uint8_t> dest,
                           Deadline deadline) {
  RETURN_IF_ERROR(sticky_.check());
  const std::string path = layout_.step(version) + "/" + part.name;
  RETURN_IF_ERROR(check_deadline(deadline, "fetch of '" + path + "'"));
  if (!is_safe_part_file_name(part.name)) {
    return invalid_argument("part name '" + part.name + "' is not a safe file name");
  }
  if (dest.size() != part.bytes) {
    return invalid_argument("fetch of '" + path + "': destination has " +
                            std::to_string(dest.size()) + " bytes, the part " +
                            std::to_string(part.bytes));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("part '" + path + "' does not exist");
    return sticky_.record(io_error("cannot open '" + path + "': " + std::strerror(errno)));
  }
  struct stat st {};
  Status s = ok_status();
  if (::fstat(fd, &st) != 0) {
    s = sticky_.record(io_error("cannot stat '" + path + "': " + std::strerror(errno)));
  } else if (static_cast<uint64_t>(st.st_size) != part.bytes) {
    s = data_loss("part '" + path + "' has " + std::to_string(st.st_size) + " bytes, expected " +
                  std::to_string(part.bytes));
  }
  size_t done = 0;
  while (s.ok() && done < dest.size()) {
    const ssize_t n = ::pread(fd, dest.data() + done, dest.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) s = sticky_.record(io_error("cannot read '" + path + "': " + std::strerror(errno)));
    if (n == 0) s = data_loss("part '" + path + "' shrank while being read");
    if (n > 0) done += static_cast<size_t>(n);
  }
  ::close(fd);
  RETURN_IF_ERROR(s);
  if (XXH3_64bits(dest.data(), dest.size()) != part.xxh3) {
    return data_loss("part '" + path + "': XXH3 mismatch (corrupted)");
  }
  return ok_status();
}

}  // namespace weightcast
