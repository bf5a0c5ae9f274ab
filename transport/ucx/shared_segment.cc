#include "transport/ucx/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace weightcast {
namespace {

// The header's first bytes; then the nonce, then the data bytes (u64).
constexpr char kMagic[8] = {'W', 'C', 'S', 'E', 'G', '0', '0', '1'};
constexpr size_t kNonceAt = sizeof kMagic;
constexpr size_t kBytesAt = kNonceAt + 16;

std::string errno_text(int e) {
  return std::strerror(e);
}

}  // namespace

const std::string& this_host_boot_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    std::getline(in, line);
    return line.size() <= kSharedSegmentMaxHostBytes ? line : std::string();
  }();
  return id;
}

uint64_t this_pid_namespace() {
  static const uint64_t ns = [] {
    struct stat st {};
    return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  }();
  return ns;
}

Result<std::unique_ptr<SharedSegment>> SharedSegment::create(uint64_t bytes,
                                                             const std::string& what) {
  const std::string& host = this_host_boot_id();
  if (host.empty()) return io_error(what + ": no boot id in /proc: cannot share memory");
  std::unique_ptr<SharedSegment> seg(new SharedSegment());
  seg->fd_ = ::memfd_create("weightcast-version", MFD_CLOEXEC);
  if (seg->fd_ < 0) return io_error(what + ": memfd_create: " + errno_text(errno));
  seg->mapped_bytes_ = kSharedSegmentHeaderBytes + bytes;
  if (::ftruncate(seg->fd_, static_cast<off_t>(seg->mapped_bytes_)) != 0) {
    return io_error(what + ": ftruncate of a " + std::to_string(seg->mapped_bytes_) +
                    "-byte memfd: " + errno_text(errno));
  }
  void* base = ::mmap(nullptr, seg->mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd_, 0);
  if (base == MAP_FAILED) {
    return io_error(what + ": mmap of a " + std::to_string(seg->mapped_bytes_) +
                    "-byte memfd: " + errno_text(errno));
  }
  seg->base_ = static_cast<uint8_t*>(base);
  SharedSegmentLocator& loc = seg->locator_;
  if (::getrandom(loc.nonce.data(), loc.nonce.size(), 0) !=
      static_cast<ssize_t>(loc.nonce.size())) {
    return io_error(what + ": getrandom for the segment's nonce: " + errno_text(errno));
  }
  loc.host = host;
  loc.pid_namespace = this_pid_namespace();
  loc.pid = static_cast<uint32_t>(::getpid());
  loc.fd = static_cast<uint32_t>(seg->fd_);
  loc.bytes = bytes;
  std::memcpy(seg->base_, kMagic, sizeof kMagic);
  std::memcpy(seg->base_ + kNonceAt, loc.nonce.data(), loc.nonce.size());
  std::memcpy(seg->base_ + kBytesAt, &bytes, sizeof bytes);
  return seg;
}

bool SharedSegment::release_memory_keep_addresses() {
  if (base_ == nullptr) return false;
  if (fd_ < 0) return true;  // released before
  void* placeholder = ::mmap(base_, mapped_bytes_, PROT_READ,
                             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (placeholder == MAP_FAILED) return false;
  ::close(fd_);
  fd_ = -1;
  locator_.bytes = 0;
  return true;
}

SharedSegment::~SharedSegment() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<MappedSegment>> MappedSegment::open(const SharedSegmentLocator& where,
                                                           const std::string& what) {
  const std::string& host = this_host_boot_id();
  if (host.empty() || where.host != host) {
    return failed_precondition(what + ": the publisher's segment is on another host");
  }
  if (where.pid_namespace == 0 || where.pid_namespace != this_pid_namespace()) {
    return failed_precondition(what + ": the publisher is in another pid namespace");
  }
  const std::string proc = "/proc/" + std::to_string(where.pid);
  const std::string path = proc + "/fd/" + std::to_string(where.fd);
  // The segment is gone; whether its process is too decides how (see the header).
  auto gone = [&](const std::string& why) -> Status {
    struct stat st {};
    if (::stat(proc.c_str(), &st) != 0) {
      return io_error(what + ": the publisher (pid " + std::to_string(where.pid) +
                      ") has exited: " + why);
    }
    return not_found(what +
                     ": its segment is closed (version retired or publisher closed): " + why);
  };
  // Only a regular file is opened: should the fd number now name a device, opening it could
  // have effects of its own. Non-blocking as well, for a FIFO swapped in after this check.
  struct stat target {};
  if (::stat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode)) {
    return gone(path + " is not a regular file");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    const std::string why = "open " + path + ": " + errno_text(e);
    // ENXIO: the fd number now names a socket.
    if (e == ENOENT || e == ESRCH || e == ENXIO) return gone(why);
    return failed_precondition(what + ": " + why);
  }
  struct stat st {};
  const size_t want = kSharedSegmentHeaderBytes + where.bytes;
  const bool sized = where.bytes <= SIZE_MAX - kSharedSegmentHeaderBytes && ::fstat(fd, &st) == 0 &&
                     S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == want;
  void* base = sized ? ::mmap(nullptr, want, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_errno = errno;
  ::close(fd);  // the mapping holds the file
  if (!sized) return gone(path + " is not a " + std::to_string(want) + "-byte regular file");
  if (base == MAP_FAILED) {
    return failed_precondition(what + ": mmap of " + path + ": " + errno_text(map_errno));
  }
  std::unique_ptr<MappedSegment> seg(new MappedSegment());
  seg->base_ = static_cast<const uint8_t*>(base);
  seg->mapped_bytes_ = want;
  uint64_t bytes = 0;
  std::memcpy(&bytes, seg->base_ + kBytesAt, sizeof bytes);
  if (std::memcmp(seg->base_, kMagic, sizeof kMagic) != 0 ||
      std::memcmp(seg->base_ + kNonceAt, where.nonce.data(), where.nonce.size()) != 0 ||
      bytes != where.bytes) {
    return gone(path + " is not the segment the version names (its nonce differs)");
  }
  return seg;
}

MappedSegment::~MappedSegment() {
  if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), mapped_bytes_);
}

}  // namespace weightcast
