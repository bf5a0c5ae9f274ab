#include "src/raw_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace weightcast {
namespace {

Status errno_status(const std::string& what, const std::string& path) {
  return io_error(what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

Result<std::vector<uint8_t>> read_whole_file(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = errno_status("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("'" + path + "' is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return out_of_range("'" + path + "' has " + std::to_string(st.st_size) +
                        " bytes, over the limit of " + std::to_string(max_bytes));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = n < 0 ? errno_status("cannot read", path)
                       : io_error("'" + path + "' shrank while being read");
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

}  // namespace weightcast
