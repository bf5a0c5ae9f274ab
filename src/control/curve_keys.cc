// CURVE key pairs through libzmq's C API, and the two-line key file format.
//
// The key file is written by hand rather than through AtomicFileWriter: that writer creates its
// temporary file 0644, and a secret key must never be readable by others, not even for the
// moment between create and chmod. The temporary file is created 0600 with O_EXCL and then
// renamed (overwrite) or hard-linked (no overwrite: link() fails on an existing target, so two
// concurrent writers cannot both "win").
#include "src/control/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "codec/base/file_io.h"

namespace weightcast {
namespace {

constexpr std::string_view kZ85Alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
constexpr size_t kKeyChars = 40;
constexpr uint64_t kMaxKeyFileBytes = 64 * 1024;

std::string errno_text(int err) {
  return std::string(std::strerror(err));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The public key derived from `secret_z85` (which must already pass is_z85_key).
Result<std::string> derive_public(const std::string& secret_z85) {
  char pub[kKeyChars + 1] = {};
  if (zmq_curve_public(pub, secret_z85.c_str()) != 0) {
    return Status(StatusCode::kUnimplemented,
                  "cannot derive a CURVE public key: " + errno_text(zmq_errno()) +
                      " (libzmq built without CURVE?)");
  }
  return std::string(pub, kKeyChars);
}

// Parses "<name> = <value>" and returns the value, or an error naming path and line.
Result<std::string> key_line(std::string_view line, std::string_view name, const std::string& path,
                             size_t line_no) {
  const std::string where = path + ":" + std::to_string(line_no) + ": ";
  const size_t eq = line.find('=');
  if (eq == std::string_view::npos || trim(line.substr(0, eq)) != name) {
    return data_loss(where + "expected '" + std::string(name) + " = <Z85 key>'");
  }
  const std::string value(trim(line.substr(eq + 1)));
  if (!is_z85_key(value)) {
    return data_loss(where + std::string(name) + " is not a 40-character Z85 key");
  }
  return value;
}

Status write_all(int fd, const std::string& text, const std::string& temp) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(temp + ": write failed: " + errno_text(errno));
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return io_error(temp + ": fsync failed: " + errno_text(errno));
  return ok_status();
}

// The default warning sink: a daemon restarted in a loop, or a tool reading the same file for
// several roles, says it once.
void warn_once_on_stderr(const std::string& path, const std::string& warning) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(path).second) return;
  std::fprintf(stderr, "%s\n", warning.c_str());
}

}  // namespace

bool is_z85_key(std::string_view key) {
  if (key.size() != kKeyChars) return false;
  for (char c : key) {
    if (kZ85Alphabet.find(c) == std::string_view::npos) return false;
  }
  // The alphabet check leaves one failure: a 5-character group whose value exceeds 2^32.
  const std::string text(key);
  uint8_t decoded[32];
  return zmq_z85_decode(decoded, text.c_str()) != nullptr;
}

Result<CurveKeyPair> generate_curve_key_pair() {
  if (!zmq_has("curve")) {
    return Status(StatusCode::kUnimplemented,
                  "libzmq was built without CURVE (libsodium): cannot generate keys");
  }
  char pub[kKeyChars + 1] = {};
  char sec[kKeyChars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return internal_error("zmq_curve_keypair failed: " + errno_text(zmq_errno()));
  }
  return CurveKeyPair{std::string(pub, kKeyChars), std::string(sec, kKeyChars)};
}

Status write_curve_key_file(const std::string& path, const CurveKeyPair& pair, bool overwrite) {
  if (!is_z85_key(pair.public_z85) || !is_z85_key(pair.secret_z85)) {
    return invalid_argument(path + ": refusing to write a key pair that is not two Z85 keys");
  }
  if (zmq_has("curve")) {
    ASSIGN_OR_RETURN(const std::string derived, derive_public(pair.secret_z85));
    if (derived != pair.public_z85) {
      return invalid_argument(path + ": public key does not belong to the secret key");
    }
  }
  if (!overwrite && ::access(path.c_str(), F_OK) == 0) {
    return failed_precondition(path + ": key file already exists (refusing to replace it)");
  }
  const std::string text =
      "# weightcast CURVE key pair; keep the secret key private (mode 0600)\n"
      "public-key = " +
      pair.public_z85 + "\nsecret-key = " + pair.secret_z85 + "\n";

  const std::filesystem::path target(path);
  const std::string dir =
      target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const std::string temp =
      dir + "/." + target.filename().string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return io_error(temp + ": cannot create: " + errno_text(errno));
  // The umask can only clear bits, but a default ACL could add some: pin the mode explicitly.
  Status st = ::fchmod(fd, 0600) == 0 ? write_all(fd, text, temp)
                                      : io_error(temp + ": fchmod failed: " + errno_text(errno));
  if (::close(fd) != 0 && st.ok()) st = io_error(temp + ": close failed: " + errno_text(errno));
  if (st.ok()) {
    if (overwrite) {
      if (::rename(temp.c_str(), path.c_str()) != 0) {
        st = io_error(path + ": rename from " + temp + " failed: " + errno_text(errno));
      }
    } else if (::link(temp.c_str(), path.c_str()) != 0) {
      st = errno == EEXIST
               ? failed_precondition(path + ": key file already exists (refusing to replace it)")
               : io_error(path + ": link from " + temp + " failed: " + errno_text(errno));
    }
  }
  ::unlink(temp.c_str());  // after rename: already gone; after link or failure: the leftover
  RETURN_IF_ERROR(st);
  return fsync_directory(dir);
}

std::string key_file_mode_warning(const std::string& path, unsigned mode) {
  if ((mode & 077) == 0) return "";
  char octal[8];
  std::snprintf(octal, sizeof(octal), "%04o", mode & 07777);
  return "warning: CURVE key file '" + path + "' has mode " + octal +
         ": its secret key is accessible to group or others; run: chmod 600 " + path;
}

Result<CurveKeyPair> read_curve_key_file(const std::string& path, const KeyFileWarning& warn) {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, read_whole_file(path, kMaxKeyFileBytes));
  ASSIGN_OR_RETURN(
      CurveKeyPair pair,
      parse_curve_key_text(
          std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path));
  // stat, not lstat: a Kubernetes secret is a symlink to the file whose mode matters.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    const std::string warning = key_file_mode_warning(path, st.st_mode);
    if (!warning.empty()) {
      if (warn) {
        warn(warning);
      } else {
        warn_once_on_stderr(path, warning);
      }
    }
  }
  return pair;
}

Result<CurveKeyPair> parse_curve_key_text(std::string_view text, const std::string& path) {
  if (text.size() > kMaxKeyFileBytes) {
    return out_of_range(path + ": " + std::to_string(text.size()) +
                        " bytes, a key file has at most " + std::to_string(kMaxKeyFileBytes));
  }
  CurveKeyPair pair;
  size_t found = 0;  // 0: expecting public-key, 1: expecting secret-key, 2: done
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    if (found == 0) {
      ASSIGN_OR_RETURN(pair.public_z85, key_line(line, "public-key", path, line_no));
    } else if (found == 1) {
      ASSIGN_OR_RETURN(pair.secret_z85, key_line(line, "secret-key", path, line_no));
    } else {
      return data_loss(path + ":" + std::to_string(line_no) +
                       ": unexpected line after the secret-key line");
    }
    ++found;
  }
  if (found < 2) {
    return data_loss(path + ": missing the " +
                     std::string(found == 0 ? "public-key" : "secret-key") + " line");
  }
  ASSIGN_OR_RETURN(const std::string derived, derive_public(pair.secret_z85));
  if (derived != pair.public_z85) {
    return data_loss(path + ": public-key does not match the one derived from secret-key");
  }
  return pair;
}

}  // namespace weightcast
