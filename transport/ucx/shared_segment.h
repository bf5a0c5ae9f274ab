// Shared-memory segments of the UCX backend's copying publisher: one memfd per version holding
// its parts, which a subscriber on the same host maps read-only and reads by loads.
//
// Why not UCX's own shared memory (ucp_mem_map with UCP_MEM_MAP_ALLOCATE, which posix/sysv
// map through ucp_rkey_ptr): with UCX 1.13 a subscriber that unpacks the rkey of such memory
// after the segment is gone (publisher dead, version retired) crashes inside
// ucp_ep_rkey_unpack. A memfd we map ourselves fails as a plain open() instead, and the same
// memory, registered in place with ucp_mem_map, still serves gets over tcp, cma or RDMA.
//
// A subscriber finds the segment as /proc/<pid>/fd/<fd> of the publisher (the way UCX's posix
// transport does by default), so it must run on the same host (boot id), see the publisher's
// pid (same pid namespace) and be allowed to read its fds (same user). A 16-byte random nonce
// in the segment's header proves the file is the segment the locator names: a recycled pid or
// fd number, or another namespace, is refused. The mapping keeps the pages alive after the
// publisher closes the memfd or exits, so a fetch that has mapped its version completes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/base/status.h"

namespace weightcast {

inline constexpr size_t kSharedSegmentHeaderBytes = 4096;  // data starts one page in
inline constexpr size_t kSharedSegmentMaxHostBytes = 64;

// Where a segment is, as the version blob carries it.
struct SharedSegmentLocator {
  std::string host;            // the publisher's boot id (/proc/sys/kernel/random/boot_id)
  uint64_t pid_namespace = 0;  // inode of its /proc/self/ns/pid (0: unknown)
  uint32_t pid = 0;
  uint32_t fd = 0;
  std::array<uint8_t, 16> nonce{};
  uint64_t bytes = 0;  // data bytes, after the header

  bool operator==(const SharedSegmentLocator&) const = default;
};

// This host's boot id, read once; empty when /proc does not have it (no segment is then
// ever mapped).
const std::string& this_host_boot_id();
// The inode of this process's pid namespace (0 when /proc does not say): a pid in a locator
// means the same process only within the same namespace.
uint64_t this_pid_namespace();

// The publisher's side: a memfd of `bytes` data bytes, mapped read-write here. Closing it (the
// destructor) unmaps and closes; subscribers that mapped it keep their mapping.
class SharedSegment {
 public:
  // kIoError naming `what` and the failing call (memfd_create, ftruncate, mmap, getrandom).
  static Result<std::unique_ptr<SharedSegment>> create(uint64_t bytes, const std::string& what);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  std::span<uint8_t> data() const { return {base_ + kSharedSegmentHeaderBytes, locator_.bytes}; }
  const SharedSegmentLocator& locator() const { return locator_; }

  // Gives the memory back but keeps the addresses: the mapping becomes anonymous, read-only
  // zeros (no memory unless read) and the memfd is closed, so the segment can no longer be
  // opened. Why: UCX 1.13 answers a get over tcp by reading the requested address without
  // checking that it is still registered, so a get that arrives after the version is gone
  // must find mapped memory. It reads zeros, which fail verification, and the subscriber
  // reports the version as retired instead of the publisher faulting. data() is empty
  // afterwards; the destructor unmaps the placeholder. Returns false (and keeps the memory)
  // if the kernel refuses the new mapping.
  bool release_memory_keep_addresses();

 private:
  SharedSegment() = default;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  SharedSegmentLocator locator_;
};

// The subscriber's side: the segment a locator names, mapped read-only.
class MappedSegment {
 public:
  // Why the segment cannot be mapped, naming `what` and the path:
  //  * kFailedPrecondition: not from here (another host or pid namespace, no permission to
  //    open the publisher's fds): the caller reads through UCX instead;
  //  * kNotFound: the segment is gone while its process lives (version retired, publisher
  //    closed; the fd now names nothing or something else, such as a FIFO or another memfd);
  //  * kIoError: the publisher's process has exited.
  // The last two mean no read of that version can succeed, through UCX either.
  static Result<std::unique_ptr<MappedSegment>> open(const SharedSegmentLocator& where,
                                                     const std::string& what);
  ~MappedSegment();
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  std::span<const uint8_t> data() const {
    return {base_ + kSharedSegmentHeaderBytes, mapped_bytes_ - kSharedSegmentHeaderBytes};
  }

 private:
  MappedSegment() = default;
  const uint8_t* base_ = nullptr;
  size_t mapped_bytes_ = 0;
};

}  // namespace weightcast
