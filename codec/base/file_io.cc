#include "codec/base/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "codec/base/user_path.h"

namespace weightcast {
namespace {

Status errno_status(const std::string& what, const std::string& path) {
  return io_error(what + " '" + path + "': " + std::strerror(errno));
}

// Opens a regular file for reading without ever blocking: O_NONBLOCK makes opening a FIFO
// return at once (a blocking open waits for a writer forever), and fstat then refuses it and
// every other kind of file, so every reader below reports "'p' is a FIFO, not a regular file".
Result<int> open_regular_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("no file '" + path + "'");
    if (errno == ELOOP) return invalid_argument("symlink loop at '" + path + "'");
    if (errno == ENXIO) {  // a socket (or a device without its driver): say which
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) return refuse_non_regular(path, st);
    }
    return errno_status("cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = errno_status("cannot stat", path);
    ::close(fd);
    return s;
  }
  if (Status s = refuse_non_regular(path, st); !s.ok()) {
    ::close(fd);
    return s;
  }
  // Reads of a regular file never block; clearing the flag keeps them plain all the same.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string parent_dir(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  ASSIGN_OR_RETURN(const int fd, open_regular_file(path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = errno_status("cannot stat", path);
    ::close(fd);
    return s;
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = errno_status("cannot map", path);
      ::close(fd);
      return s;
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::string& path) {
  AtomicFileWriter w;
  w.path_ = path;
  const std::filesystem::path p(path);
  w.temp_ = (std::filesystem::path(parent_dir(path)) /
             ("." + p.filename().string() + ".tmp." + std::to_string(::getpid())))
                .string();
  w.fd_ = ::open(w.temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return errno_status("cannot create", w.temp_);
  return w;
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& o) noexcept
    : path_(std::move(o.path_)),
      temp_(std::move(o.temp_)),
      fd_(o.fd_),
      written_(o.written_),
      committed_(o.committed_) {
  o.fd_ = -1;
  o.committed_ = true;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

Status AtomicFileWriter::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) return internal_error("write to '" + path_ + "' after commit");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write", temp_);
    }
    done += static_cast<size_t>(n);
  }
  written_ += bytes.size();
  return ok_status();
}

ByteSink AtomicFileWriter::sink() {
  return [this](std::span<const uint8_t> bytes) { return write(bytes); };
}

Status AtomicFileWriter::commit() {
  if (fd_ < 0) return internal_error("'" + path_ + "' committed twice");
  if (::fsync(fd_) != 0) return errno_status("cannot fsync", temp_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return errno_status("cannot close", temp_);
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) return errno_status("cannot rename onto", path_);
  committed_ = true;
  return fsync_directory(parent_dir(path_));
}

Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::create(path));
  RETURN_IF_ERROR(w.write(bytes));
  return w.commit();
}

Status fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_status("cannot fsync directory", dir);
  return ok_status();
}

Status remove_file_durably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return ok_status();
    return errno_status("cannot remove", path);
  }
  return fsync_directory(parent_dir(path));
}

Result<std::vector<uint8_t>> read_file_range(const std::string& path, uint64_t offset,
                                             uint64_t bytes) {
  ASSIGN_OR_RETURN(const int fd, open_regular_file(path));
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = n < 0 ? errno_status("cannot read", path)
                       : data_loss("'" + path + "' ends before byte " +
                                   std::to_string(offset + bytes) + " (truncated)");
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

Result<std::vector<uint8_t>> read_whole_file(const std::string& path, uint64_t max_bytes) {
  ASSIGN_OR_RETURN(const int fd, open_regular_file(path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = errno_status("cannot stat", path);
    ::close(fd);
    return s;
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

Status pwrite_all(int fd, const std::string& path, std::span<const uint8_t> bytes,
                  uint64_t offset) {
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return io_error("cannot write " + std::to_string(bytes.size()) + " bytes to '" + path +
                      "' at offset " + std::to_string(offset) + ": " +
                      std::strerror(n == 0 ? EIO : errno));
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return ok_status();
}

Status write_and_sync_file(
    const std::string& path, std::span<const uint8_t> bytes,
    const std::function<Status(const std::string&, uint64_t)>& before_write) {
  if (before_write) RETURN_IF_ERROR(before_write(path, bytes.size()));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create '" + path + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = io_error("cannot write '" + path + "' at offset " + std::to_string(done) + ": " +
                          std::strerror(errno));
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = io_error("cannot fsync '" + path + "': " + std::strerror(errno));
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return io_error("cannot close '" + path + "': " + std::strerror(errno));
  return ok_status();
}

}  // namespace weightcast
