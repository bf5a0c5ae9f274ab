#include "codec/base/user_path.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace weightcast {

const char* file_kind_name(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "regular file";
    case S_IFDIR:
      return "directory";
    case S_IFIFO:
      return "FIFO";
    case S_IFSOCK:
      return "socket";
    case S_IFCHR:
      return "character device";
    case S_IFBLK:
      return "block device";
    case S_IFLNK:
      return "symlink";
    default:
      return "special file";
  }
}

Result<std::optional<struct stat>> stat_user_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return std::optional<struct stat>(st);
  if (errno == ENOENT || errno == ENOTDIR) return std::optional<struct stat>();
  if (errno == ELOOP) return invalid_argument("symlink loop at '" + path + "'");
  return io_error("cannot stat '" + path + "': " + std::strerror(errno));
}

Status refuse_non_regular(const std::string& path, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return ok_status();
  const char* kind = file_kind_name(st.st_mode);
  const bool vowel = std::strchr("aeiouAEIOU", kind[0]) != nullptr;
  return invalid_argument("'" + path + "' is " + (vowel ? "an " : "a ") + kind +
                          ", not a regular file");
}

Status check_existing_path(const std::string& path) {
  ASSIGN_OR_RETURN(const auto st, stat_user_path(path));
  if (!st) return not_found("'" + path + "' does not exist");
  return ok_status();
}

Status check_regular_file(const std::string& path) {
  ASSIGN_OR_RETURN(const auto st, stat_user_path(path));
  if (!st) return not_found("'" + path + "' does not exist");
  return refuse_non_regular(path, *st);
}

Status check_directory(const std::string& path) {
  ASSIGN_OR_RETURN(const auto st, stat_user_path(path));
  if (!st) return not_found("'" + path + "' does not exist");
  if (!S_ISDIR(st->st_mode)) {
    return invalid_argument("'" + path + "' is a " + file_kind_name(st->st_mode) +
                            ", not a directory");
  }
  return ok_status();
}

Result<std::string> resolve_user_path(const std::string& path) {
  if (path.empty()) return invalid_argument("an empty path names no file");
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return std::string(buf);
  if (errno == ELOOP) return invalid_argument("symlink loop at '" + path + "'");
  if (errno != ENOENT) return io_error("cannot resolve '" + path + "': " + std::strerror(errno));
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    return invalid_argument("'" + path + "' is a symlink to a file that does not exist");
  }
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") {
    return invalid_argument("'" + path + "' does not name a file");
  }
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  if (::realpath(dir.c_str(), buf) == nullptr) {
    if (errno == ELOOP) return invalid_argument("symlink loop at '" + dir + "'");
    return not_found("the directory of '" + path + "' does not exist");
  }
  const std::string resolved_dir(buf);
  return resolved_dir == "/" ? "/" + name : resolved_dir + "/" + name;
}

}  // namespace weightcast
