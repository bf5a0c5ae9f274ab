// Host staging memory for the copy executors, and a pool that lets later plans reuse
// it. Fresh anonymous memory costs a page fault (and the kernel zeroing the page) on first
// touch; on `weightcast bench coalesce` that was most of an export's time. So:
//  - large buffers (kMappedThreshold and up) are mmap-ed and pre-faulted range by range with
//    madvise(MADV_POPULATE_WRITE) just before they are written: one system call per range
//    instead of a fault per 4 KiB page (measured: ~20% less CPU than faulting; huge pages
//    advised without pre-faulting cost more than plain faults on this VM, so none are asked);
//  - a StagingPool caches released buffers and hands them to later plans, whose copies then
//    touch no fresh page at all (measured: the copy runs at memcpy speed).
// Buffers are reused only after release: a buffer is lent to one holder at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "codec/base/status.h"

namespace weightcast {

class StagingPool;

// One staging allocation, lent by a pool or owned outright. Move-only; destroying it returns
// it to its pool (which may cache it) or frees it.
class StagingBuffer {
 public:
  // Buffers of at least this many bytes are mmap-ed (capacity rounded up to 2 MiB, munmap
  // on free); smaller ones come from operator new (rounded up to 64 bytes).
  static constexpr uint64_t kMappedThreshold = uint64_t{1} << 20;

  StagingBuffer() = default;
  StagingBuffer(StagingBuffer&& other) noexcept;
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  ~StagingBuffer();

  uint8_t* data() const { return data_; }
  uint64_t capacity() const { return capacity_; }  // >= the bytes asked for
  // Whether the bytes were touched before (a reused buffer): then prefault() is needless.
  bool warm() const { return warm_; }
  // Faults in the pages of [offset, offset + bytes) ahead of writing them, one system call
  // instead of a fault per page. No-op for small or warm buffers and where the kernel lacks
  // MADV_POPULATE_WRITE (before Linux 5.14). Safe to call on disjoint ranges concurrently.
  void prefault(uint64_t offset, uint64_t bytes) const;

 private:
  friend class StagingPool;
  friend Result<StagingBuffer> allocate_staging(uint64_t bytes);
  struct Shared;
  void release();

  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  bool mapped_ = false;
  bool warm_ = false;
  std::shared_ptr<Shared> home_;  // the pool it returns to; null: freed on destruction
};

// A fresh buffer of at least `bytes` (1 byte where `bytes` is 0), not from any pool.
Result<StagingBuffer> allocate_staging(uint64_t bytes);

// A thread-safe cache of released staging buffers. acquire() hands out the smallest cached
// buffer that fits (at most twice the size asked for) or a fresh one; a buffer comes back when
// its holder destroys it. At most `max_cached_bytes` stay cached: beyond that the least
// recently released buffers are freed (lent buffers do not count; a plan gets all it needs).
// The pool may be destroyed before buffers it lent: those are then freed on release.
class StagingPool {
 public:
  explicit StagingPool(uint64_t max_cached_bytes = uint64_t{4} << 30);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  Result<StagingBuffer> acquire(uint64_t bytes);

  struct Stats {
    uint64_t cached_bytes = 0;  // capacity of idle buffers held for reuse
    uint64_t lent_bytes = 0;    // capacity of buffers out with holders
    uint64_t hits = 0;          // acquires served from the cache
    uint64_t misses = 0;        // acquires that allocated
    uint64_t evicted = 0;       // released buffers freed to respect the cap
  };
  Stats stats() const;
  uint64_t max_cached_bytes() const;
  // Frees every cached buffer (lent ones are untouched).
  void trim();

 private:
  std::shared_ptr<StagingBuffer::Shared> shared_;
};

}  // namespace weightcast
