#include "transport/fs/step_commit.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "codec/base/file_io.h"
#include "transport/fault_point.h"
#include "transport/fs/delta_step.h"
#include "transport/fs/journal_files.h"

namespace weightcast {

int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string new_journal_id() {
  std::random_device random;  // /dev/urandom on Linux
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 8; ++i) {
    const uint32_t word = random();
    for (int nibble = 0; nibble < 4; ++nibble) id += kHex[(word >> (4 * nibble)) & 0xF];
  }
  return id;
}

Result<std::optional<proto::JournalHead>> read_journal_head(const JournalLayout& layout) {
  auto head = read_head_file(layout.head());
  if (head.ok()) {
    if (head->empty()) return std::optional<proto::JournalHead>();
    return std::optional<proto::JournalHead>(*head);
  }
  if (head.status().code() != StatusCode::kNotFound) return head.status();
  // Without HEAD the root is empty only if it holds no step either: a deleted or lost HEAD
  // must never make a writer start over and reuse the committed version numbers.
  std::error_code ec;
  if (!std::filesystem::exists(layout.root(), ec)) return std::optional<proto::JournalHead>();
  ASSIGN_OR_RETURN(auto steps, layout.list_steps());
  if (steps.empty()) return std::optional<proto::JournalHead>();
  return data_loss("journal '" + layout.root() + "' has no HEAD but " +
                   std::to_string(steps.size()) + " step directories (versions " +
                   std::to_string(steps.front()) + ".." + std::to_string(steps.back()) +
                   "): it is not empty; run `weightcast journal repair-head --root " +
                   layout.root() + "` to rebuild HEAD from the newest complete step");
}

Status write_head(const JournalLayout& layout, const proto::JournalHead& head) {
  return write_journal_file(layout.head(), JournalFileKind::kHead, head);
}

Result<JournalLock> JournalLock::acquire(const JournalLayout& layout, Mode mode) {
  RETURN_IF_ERROR(make_directories(layout.staging()));
  RETURN_IF_ERROR(make_directories(layout.leases()));
  JournalLock lock;
  lock.fd_ = ::open(layout.lock().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0) {
    return io_error("cannot open '" + layout.lock() + "': " + std::strerror(errno));
  }
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = ::pread(lock.fd_, holder, sizeof holder - 1, 0);
    return failed_precondition("journal '" + layout.root() + "' has another writer (pid " +
                               (n > 0 ? std::string(holder, static_cast<size_t>(n)) : "?") +
                               " holds " + layout.lock() + ")");
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock.fd_, 0) != 0 ||
      ::pwrite(lock.fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return io_error("cannot write '" + layout.lock() + "': " + std::strerror(errno));
  }
  if (mode == Mode::kRepair) {
    auto head = read_journal_head(layout);
    if (head.ok()) lock.head_ = *head;
    return lock;
  }
  ASSIGN_OR_RETURN(lock.head_, read_journal_head(layout));
  auto raw_head = read_head_file(layout.head());
  if (raw_head.ok()) lock.journal_id_ = raw_head->journal_id();
  if (lock.journal_id_.empty()) {
    // A new journal (or one from before identities): an identity, and an empty HEAD so that
    // from now on a missing HEAD is never mistaken for an empty journal.
    lock.journal_id_ = new_journal_id();
    if (!raw_head.ok()) {
      proto::JournalHead empty;
      empty.set_empty(true);
      empty.set_journal_id(lock.journal_id_);
      empty.set_committed_unix_ms(unix_now_ms());
      RETURN_IF_ERROR(write_head(layout, empty));
    }
  }

  // A crashed writer's leftovers: everything in .staging/, and steps HEAD never named.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(layout.staging(), ec)) {
    RETURN_IF_ERROR(remove_tree(entry.path().string()));
    ++lock.cleaned_;
  }
  if (ec) return io_error("cannot list '" + layout.staging() + "': " + ec.message());
  // HEAD's temporary file (write_file_atomically: .HEAD.tmp.<pid>) when a writer died while
  // replacing HEAD; otherwise one is left in the root per such crash, forever.
  for (const auto& entry : std::filesystem::directory_iterator(layout.root(), ec)) {
    if (!entry.path().filename().string().starts_with(".HEAD.tmp.")) continue;
    RETURN_IF_ERROR(remove_tree(entry.path().string()));
    ++lock.cleaned_;
  }
  if (ec) return io_error("cannot list '" + layout.root() + "': " + ec.message());
  ASSIGN_OR_RETURN(auto steps, layout.list_steps());
  for (const uint64_t v : steps) {
    if (lock.head_ && v <= lock.head_->version()) continue;
    RETURN_IF_ERROR(remove_tree(layout.step(v)));
    ++lock.cleaned_;
  }
  if (lock.cleaned_ > 0) RETURN_IF_ERROR(fsync_directory(layout.root()));
  return lock;
}

JournalLock::JournalLock(JournalLock&& other) noexcept
    : fd_(other.fd_),
      head_(std::move(other.head_)),
      journal_id_(std::move(other.journal_id_)),
      cleaned_(other.cleaned_) {
  other.fd_ = -1;
}

JournalLock::~JournalLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

Result<std::string> create_staging_dir(const JournalLayout& layout, uint64_t version) {
  const std::string dir = layout.staging() + "/" + JournalLayout::step_dir_name(version);
  RETURN_IF_ERROR(remove_tree(dir));
  RETURN_IF_ERROR(make_directories(dir));
  return dir;
}

Status write_manifest_file(const std::string& dir, const proto::StepManifest& manifest) {
  const std::vector<uint8_t> framed = frame_journal_message(JournalFileKind::kManifest, manifest);
  RETURN_IF_ERROR(write_and_sync_file(dir + "/MANIFEST", framed, {}));
  return fsync_directory(dir);
}

Status commit_step(const JournalLayout& layout, const std::string& staged_dir,
                   const proto::StepManifest& manifest, const std::function<void()>& before_head,
                   const std::function<Status()>& before_rename) {
  RETURN_IF_ERROR(write_manifest_file(staged_dir, manifest));  // fsyncs staged_dir too
  if (before_rename) RETURN_IF_ERROR(before_rename());
  fault_point("journal.staged", manifest.version());  // every file of the step in .staging/
  const std::string final_dir = layout.step(manifest.version());
  RETURN_IF_ERROR(remove_tree(final_dir));  // an uncommitted leftover of this version
  if (std::rename(staged_dir.c_str(), final_dir.c_str()) != 0) {
    return io_error("cannot rename '" + staged_dir + "' to '" + final_dir +
                    "': " + std::strerror(errno));
  }
  RETURN_IF_ERROR(fsync_directory(layout.staging()));
  RETURN_IF_ERROR(fsync_directory(layout.root()));
  fault_point("journal.renamed", manifest.version());  // the step in place, HEAD not moved
  if (before_head) before_head();
  proto::JournalHead head;
  head.set_version(manifest.version());
  head.set_anchor_version(manifest.anchor_version());
  head.set_committed_unix_ms(unix_now_ms());
  head.set_journal_id(manifest.journal_id());
  return write_head(layout, head);
}

}  // namespace weightcast
