#include "transport/user_file_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "codec/base/file_io.h"
#include "codec/base/user_path.h"
#include "transport/fs/journal_root.h"

namespace weightcast {
namespace {

Status errno_status(const std::string& what, const std::string& path) {
  return io_error(what + " '" + path + "': " + std::strerror(errno));
}

std::string dir_of(const std::string& resolved) {
  const std::string dir = std::filesystem::path(resolved).parent_path().string();
  return dir.empty() ? "/" : dir;
}

std::string name_of(const std::string& resolved) {
  return std::filesystem::path(resolved).filename().string();
}

Status refuse_read_only(const std::string& path, const std::string& resolved,
                        const struct stat& st) {
  // No write bit at all is a deliberate "do not modify", even for root, who could write it.
  if ((st.st_mode & 0222) == 0) return failed_precondition("'" + path + "' is read-only");
  if (::access(resolved.c_str(), W_OK) != 0) {
    if (errno == EACCES || errno == EROFS || errno == EPERM) {
      return failed_precondition("'" + path + "' is read-only");
    }
    return errno_status("cannot check write access to", path);
  }
  return ok_status();
}

Status refuse_inputs(const std::string& path, const std::string& resolved,
                     const std::optional<struct stat>& out,
                     const std::vector<std::string>& inputs) {
  for (const std::string& input : inputs) {
    auto in = stat_user_path(input);
    if (out && in.ok() && *in && (*in)->st_dev == out->st_dev && (*in)->st_ino == out->st_ino) {
      return invalid_argument("output '" + path + "' is the input '" + input + "'");
    }
    auto in_resolved = resolve_user_path(input);
    if (in_resolved.ok() && *in_resolved == resolved) {
      return invalid_argument("output '" + path + "' is the input '" + input + "'");
    }
  }
  return ok_status();
}

// The pid of a temp file name `<prefix><digits>[.<n>]`; 0 when the name is not one.
pid_t temp_owner(const std::string& name, const std::string& prefix) {
  if (!name.starts_with(prefix)) return 0;
  const std::string rest = name.substr(prefix.size());
  const std::string digits = rest.substr(0, rest.find('.'));
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return static_cast<pid_t>(std::stol(digits));
}

std::atomic<uint64_t> g_temp_sequence{0};

struct CheckedOutput {
  std::string resolved;
  std::optional<struct stat> existing;
};

Result<CheckedOutput> check_output(const std::string& path, const UserFileOptions& options) {
  CheckedOutput out;
  ASSIGN_OR_RETURN(out.resolved, resolve_user_path(path));
  ASSIGN_OR_RETURN(out.existing, stat_user_path(out.resolved));
  if (out.existing) {
    RETURN_IF_ERROR(refuse_non_regular(path, *out.existing));
    RETURN_IF_ERROR(refuse_read_only(path, out.resolved, *out.existing));
  }
  const std::string dir = dir_of(out.resolved);
  for (const std::string& root : options.journals) {
    auto resolved_root = resolve_user_path(root);
    if (resolved_root.ok() && (dir == *resolved_root || dir.starts_with(*resolved_root + "/"))) {
      return invalid_argument("output '" + path + "' lies inside the journal '" + root +
                              "'; only the journal writer may write there");
    }
  }
  if (const auto journal = enclosing_journal_root(dir)) {
    return invalid_argument("output '" + path + "' lies inside the journal '" + *journal +
                            "'; only the journal writer may write there");
  }
  RETURN_IF_ERROR(refuse_inputs(path, out.resolved, out.existing, options.inputs));
  return out;
}

}  // namespace

size_t remove_stale_user_temps(const std::string& resolved_target) {
  const std::string dir = dir_of(resolved_target);
  const std::string name = name_of(resolved_target);
  const std::string prefixes[] = {"." + name + ".wctmp.", "." + name + ".tmp."};
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return 0;
  size_t removed = 0;
  while (const dirent* e = ::readdir(d.get())) {
    for (const std::string& prefix : prefixes) {
      const pid_t pid = temp_owner(e->d_name, prefix);
      if (pid <= 0 || pid == ::getpid()) continue;
      if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
      if (::unlink((dir + "/" + e->d_name).c_str()) == 0) ++removed;
    }
  }
  return removed;
}

Result<UserFileWriter> UserFileWriter::create(const std::string& path,
                                              const UserFileOptions& options) {
  ASSIGN_OR_RETURN(CheckedOutput checked, check_output(path, options));
  UserFileWriter w;
  w.path_ = path;
  w.resolved_ = std::move(checked.resolved);
  const std::optional<struct stat>& existing = checked.existing;
  const std::string dir = dir_of(w.resolved_);
  remove_stale_user_temps(w.resolved_);

  if (existing && options.mode == UserWriteMode::kInPlace) {
    w.fd_ = ::open(w.resolved_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w.fd_ < 0) {
      if (errno == EACCES || errno == EROFS || errno == EPERM) {
        return failed_precondition("'" + path + "' is read-only");
      }
      return errno_status("cannot open", path);
    }
    struct stat st {};
    if (::fstat(w.fd_, &st) != 0) return errno_status("cannot stat", path);
    if (st.st_dev != existing->st_dev || st.st_ino != existing->st_ino) {
      return io_error("'" + path + "' was replaced while being opened");
    }
    RETURN_IF_ERROR(refuse_non_regular(path, st));
    w.in_place_ = true;
    return w;
  }

  w.temp_ = dir + "/." + name_of(w.resolved_) + ".wctmp." + std::to_string(::getpid()) + "." +
            std::to_string(g_temp_sequence.fetch_add(1));
  const mode_t mode = existing ? (existing->st_mode & 07777) : 0666;
  w.fd_ = ::open(w.temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (w.fd_ < 0) {
    const Status s = errno_status("cannot create a temporary file for", path);
    w.temp_.clear();  // not ours: nothing to remove
    return s;
  }
  if (existing) {
    // The umask may have cleared bits the old file had; the replacement keeps them all.
    if (::fchmod(w.fd_, mode) != 0) return errno_status("cannot set the mode of", w.temp_);
    if (::geteuid() == 0 && ::fchown(w.fd_, existing->st_uid, existing->st_gid) != 0) {
      return errno_status("cannot set the owner of", w.temp_);
    }
  }
  return w;
}

UserFileWriter::UserFileWriter(UserFileWriter&& o) noexcept
    : path_(std::move(o.path_)),
      resolved_(std::move(o.resolved_)),
      temp_(std::move(o.temp_)),
      fd_(o.fd_),
      in_place_(o.in_place_),
      committed_(o.committed_),
      written_(o.written_) {
  o.fd_ = -1;
  o.temp_.clear();
  o.committed_ = true;
}

UserFileWriter::~UserFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

Status UserFileWriter::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) return internal_error("write to '" + path_ + "' after commit");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(written_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write '" + path_ + "' at offset " + std::to_string(written_ + done) +
                      ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  written_ += bytes.size();
  return ok_status();
}

ByteSink UserFileWriter::sink() {
  return [this](std::span<const uint8_t> bytes) { return write(bytes); };
}

Status UserFileWriter::commit() {
  if (fd_ < 0 || committed_) return internal_error("'" + path_ + "' committed twice");
  if (in_place_ && ::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
    return errno_status("cannot set the length of", path_);
  }
  if (::fsync(fd_) != 0) return errno_status("cannot fsync", in_place_ ? path_ : temp_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return errno_status("cannot close", in_place_ ? path_ : temp_);
  if (in_place_) {
    committed_ = true;
    return ok_status();
  }
  if (::rename(temp_.c_str(), resolved_.c_str()) != 0) {
    return errno_status("cannot rename a temporary file onto", path_);
  }
  committed_ = true;
  return fsync_directory(dir_of(resolved_));
}

Status check_user_output(const std::string& path, const UserFileOptions& options) {
  return check_output(path, options).status();
}

Status write_user_file(const std::string& path, std::span<const uint8_t> bytes,
                       const UserFileOptions& options) {
  ASSIGN_OR_RETURN(UserFileWriter w, UserFileWriter::create(path, options));
  RETURN_IF_ERROR(w.write(bytes));
  return w.commit();
}

}  // namespace weightcast
