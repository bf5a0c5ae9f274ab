#include "transport/staging_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and we skip it
#endif

namespace weightcast {
namespace {

constexpr uint64_t kMappedRound = uint64_t{2} << 20;  // size classes of mapped buffers
constexpr uint64_t kHeapAlign = 64;
constexpr uint64_t kPage = 4096;

uint64_t round_up(uint64_t n, uint64_t to) {
  return (n + to - 1) / to * to;
}

// What acquire() will allocate for `bytes`: the size classes buffers are matched by.
uint64_t capacity_for(uint64_t bytes) {
  const uint64_t want = std::max<uint64_t>(bytes, 1);
  return want >= StagingBuffer::kMappedThreshold ? round_up(want, kMappedRound)
                                                 : round_up(want, kHeapAlign);
}

struct Block {
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
  bool mapped = false;
};

void free_block(const Block& b) {
  if (b.data == nullptr) return;
  if (b.mapped) {
    munmap(b.data, b.capacity);
  } else {
    ::operator delete (b.data, std::align_val_t{kHeapAlign});
  }
}

// A fresh block of capacity_for(bytes): small ones from the heap, large ones mapped (not yet
// faulted in: StagingBuffer::prefault does that where the copy happens, in parallel).
Result<Block> allocate_block(uint64_t bytes) {
  const uint64_t capacity = capacity_for(bytes);
  if (capacity < StagingBuffer::kMappedThreshold) {
    void* p = ::operator new (capacity, std::align_val_t{kHeapAlign}, std::nothrow);
    if (p == nullptr) {
      return io_error("staging of " + std::to_string(bytes) + " bytes: out of memory");
    }
    return Block{static_cast<uint8_t*>(p), capacity, false};
  }
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return io_error("staging of " + std::to_string(bytes) +
                    " bytes: mmap: " + std::strerror(errno));
  }
  return Block{static_cast<uint8_t*>(p), capacity, true};
}

}  // namespace

struct StagingBuffer::Shared {
  struct Cached {
    Block block;
    uint64_t released = 0;  // release order, for evicting the least recent first
  };
  mutable std::mutex mu;
  bool open = true;  // false once the StagingPool is gone
  uint64_t max_cached = 0;
  uint64_t releases = 0;
  std::multimap<uint64_t, Cached> cached;  // by capacity
  StagingPool::Stats stats;
};

StagingBuffer::StagingBuffer(StagingBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      mapped_(other.mapped_),
      warm_(other.warm_),
      home_(std::move(other.home_)) {}

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    mapped_ = other.mapped_;
    warm_ = other.warm_;
    home_ = std::move(other.home_);
  }
  return *this;
}

StagingBuffer::~StagingBuffer() {
  release();
}

void StagingBuffer::prefault(uint64_t offset, uint64_t bytes) const {
  if (!mapped_ || warm_ || bytes == 0 || offset >= capacity_) return;
  const uint64_t begin = offset / kPage * kPage;
  const uint64_t end =
      std::min(round_up(offset + std::min(bytes, capacity_ - offset), kPage), capacity_);
  madvise(data_ + begin, end - begin, MADV_POPULATE_WRITE);  // failure: pages fault on write
}

void StagingBuffer::release() {
  if (data_ == nullptr) return;
  const Block mine{std::exchange(data_, nullptr), std::exchange(capacity_, 0), mapped_};
  std::shared_ptr<Shared> home = std::move(home_);
  std::vector<Block> to_free;
  if (home != nullptr) {
    std::lock_guard lock(home->mu);
    home->stats.lent_bytes -= mine.capacity;
    if (home->open && mine.capacity <= home->max_cached) {
      while (home->stats.cached_bytes + mine.capacity > home->max_cached) {
        auto oldest = home->cached.begin();
        for (auto it = home->cached.begin(); it != home->cached.end(); ++it) {
          if (it->second.released < oldest->second.released) oldest = it;
        }
        home->stats.cached_bytes -= oldest->first;
        ++home->stats.evicted;
        to_free.push_back(oldest->second.block);
        home->cached.erase(oldest);
      }
      home->cached.emplace(mine.capacity, Shared::Cached{mine, ++home->releases});
      home->stats.cached_bytes += mine.capacity;
    } else {
      if (home->open) ++home->stats.evicted;
      to_free.push_back(mine);
    }
  } else {
    to_free.push_back(mine);
  }
  for (const Block& b : to_free) free_block(b);  // outside the lock: munmap can be slow
}

Result<StagingBuffer> allocate_staging(uint64_t bytes) {
  ASSIGN_OR_RETURN(const Block b, allocate_block(bytes));
  StagingBuffer out;
  out.data_ = b.data;
  out.capacity_ = b.capacity;
  out.mapped_ = b.mapped;
  return out;
}

StagingPool::StagingPool(uint64_t max_cached_bytes)
    : shared_(std::make_shared<StagingBuffer::Shared>()) {
  shared_->max_cached = max_cached_bytes;
}

StagingPool::~StagingPool() {
  std::multimap<uint64_t, StagingBuffer::Shared::Cached> cached;
  {
    std::lock_guard lock(shared_->mu);
    shared_->open = false;
    cached.swap(shared_->cached);
    shared_->stats.cached_bytes = 0;
  }
  for (const auto& [capacity, c] : cached) free_block(c.block);
}

Result<StagingBuffer> StagingPool::acquire(uint64_t bytes) {
  const uint64_t capacity = capacity_for(bytes);
  {
    std::lock_guard lock(shared_->mu);
    auto it = shared_->cached.lower_bound(capacity);
    if (it != shared_->cached.end() && it->first <= 2 * capacity) {
      const Block b = it->second.block;
      shared_->cached.erase(it);
      shared_->stats.cached_bytes -= b.capacity;
      shared_->stats.lent_bytes += b.capacity;
      ++shared_->stats.hits;
      StagingBuffer out;
      out.data_ = b.data;
      out.capacity_ = b.capacity;
      out.mapped_ = b.mapped;
      out.warm_ = true;
      out.home_ = shared_;
      return out;
    }
    ++shared_->stats.misses;
  }
  ASSIGN_OR_RETURN(StagingBuffer out, allocate_staging(bytes));
  {
    std::lock_guard lock(shared_->mu);
    shared_->stats.lent_bytes += out.capacity_;
  }
  out.home_ = shared_;
  return out;
}

StagingPool::Stats StagingPool::stats() const {
  std::lock_guard lock(shared_->mu);
  return shared_->stats;
}

uint64_t StagingPool::max_cached_bytes() const {
  return shared_->max_cached;  // set once, before the pool is shared
}

void StagingPool::trim() {
  std::multimap<uint64_t, StagingBuffer::Shared::Cached> cached;
  {
    std::lock_guard lock(shared_->mu);
    cached.swap(shared_->cached);
    shared_->stats.cached_bytes = 0;
  }
  for (const auto& [capacity, c] : cached) free_block(c.block);
}

}  // namespace weightcast
