#include "transport/ucx/rendezvous_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace weightcast {

Status InMemoryStore::put(const std::string& key, std::vector<uint8_t> value) {
  std::lock_guard lock(mu_);
  values_[key] = std::move(value);
  return ok_status();
}

Result<std::optional<std::vector<uint8_t>>> InMemoryStore::get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::optional<std::vector<uint8_t>>();
  return std::optional<std::vector<uint8_t>>(it->second);
}

Status InMemoryStore::erase(const std::string& key) {
  std::lock_guard lock(mu_);
  values_.erase(key);
  return ok_status();
}

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {}

std::string FileStore::path_of(const std::string& key) const {
  static const char kHex[] = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '_';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  // "." and ".." are the only names the escaping lets through that are not plain files.
  if (name.empty() || name == "." || name == "..") name = "_" + name;
  return dir_ + "/" + name;
}

Status FileStore::put(const std::string& key, std::vector<uint8_t> value) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = path_of(key);
  // Temporary names start with '_t' followed by a non-hex byte, which no escaped key produces.
  const std::string tmp =
      dir_ + "/_tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return io_error("rendezvous store: cannot create '" + tmp + "' for key '" + key +
                    "': " + std::strerror(errno));
  }
  size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error("rendezvous store: cannot write '" + tmp + "' for key '" + key +
                      "': " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("rendezvous store: cannot rename '" + tmp + "' to '" + path +
                    "': " + std::strerror(err));
  }
  return ok_status();
}

Result<std::optional<std::vector<uint8_t>>> FileStore::get(const std::string& key) {
  const std::string path = path_of(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::optional<std::vector<uint8_t>>();
  if (fd < 0) {
    return io_error("rendezvous store: cannot open '" + path + "' (key '" + key +
                    "'): " + std::strerror(errno));
  }
  // The fd pins the inode: a concurrent put renames a new file over the name, never this one.
  std::vector<uint8_t> out;
  uint8_t buf[64 << 10];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return io_error("rendezvous store: cannot read '" + path + "': " + std::strerror(err));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return std::optional<std::vector<uint8_t>>(std::move(out));
}

Status FileStore::erase(const std::string& key) {
  const std::string path = path_of(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return io_error("rendezvous store: cannot remove '" + path + "': " + std::strerror(errno));
  }
  return ok_status();
}

}  // namespace weightcast
