// PipelinedHasher (pipelined_hasher.h).
#include "transport/ucx/pipelined_hasher.h"

#include <xxhash.h>
// The runtime-dispatched XXH3 (AVX2 where the CPU has it; same values), as in ucx_subscriber.cc.
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <chrono>
#include <memory>

namespace weightcast {
namespace {

// How long the idle helper keeps polling for the next job before it sleeps: a fetch of a
// small part lasts tens of microseconds, far less than a sleep and wake-up round trip costs
// on a loaded machine, and parts of one version are fetched back to back.
constexpr auto kStayAwake = std::chrono::milliseconds(2);

// Bytes hashed between two looks at the cancel flag and the landed prefix.
constexpr size_t kSlice = 256 << 10;

}  // namespace

PipelinedHasher::~PipelinedHasher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void PipelinedHasher::begin(const uint8_t* data, size_t size) {
  data_ = data;
  size_ = size;
  landed_.store(0, std::memory_order_relaxed);
  cancel_.store(false, std::memory_order_relaxed);
  job_.fetch_add(1, std::memory_order_release);  // publishes data_, size_, landed_, cancel_
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  // The helper checks job_ under mu_ before it sleeps: taking mu_ here means it either sees
  // the new job or is already waiting when notified.
  { std::lock_guard lock(mu_); }
  wake_.notify_one();
}

void PipelinedHasher::landed(size_t prefix) {
  landed_.store(prefix, std::memory_order_release);
}

uint64_t PipelinedHasher::finish() {
  const uint64_t job = job_.load(std::memory_order_relaxed);
  while (done_job_.load(std::memory_order_acquire) != job) std::this_thread::yield();
  return digest_;
}

void PipelinedHasher::abandon() {
  cancel_.store(true, std::memory_order_release);
  (void)finish();
}

void PipelinedHasher::run() {
  const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                              &XXH3_freeState);
  uint64_t seen = 0;
  while (true) {
    const auto give_up = std::chrono::steady_clock::now() + kStayAwake;
    while (job_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    if (job_.load(std::memory_order_acquire) == seen) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || job_.load(std::memory_order_acquire) != seen; });
      if (job_.load(std::memory_order_acquire) == seen) return;  // stopped, no job pending
    }
    seen = job_.load(std::memory_order_acquire);
    hash_job(state.get());
    done_job_.store(seen, std::memory_order_release);
  }
}

void PipelinedHasher::hash_job(XXH3_state_t* state) {
  if (state == nullptr) {  // no streaming state (out of memory): hash it all once landed
    while (landed_.load(std::memory_order_acquire) < size_) {
      if (cancel_.load(std::memory_order_acquire)) return;
      std::this_thread::yield();
    }
    digest_ = XXH3_64bits(data_, size_);
    return;
  }
  (void)XXH3_64bits_reset(state);
  size_t hashed = 0;
  while (hashed < size_) {
    if (cancel_.load(std::memory_order_acquire)) return;
    const size_t landed = landed_.load(std::memory_order_acquire);
    if (landed > hashed) {
      const size_t n = std::min(landed - hashed, kSlice);
      (void)XXH3_64bits_update(state, data_ + hashed, n);
      hashed += n;
    } else {
      std::this_thread::yield();
    }
  }
  digest_ = XXH3_64bits_digest(state);
}

}  // namespace weightcast
