// PipelinedHasher: XXH3-64 of a buffer computed on a helper thread while the buffer is still
// being filled, so that verifying a fetched part overlaps copying it instead of following it.
//
// The filling thread announces how long a prefix is final (landed()); the helper hashes up to
// there, a slice at a time, while later bytes are being written, and finish() returns the
// digest once everything has landed and been hashed. Slices are hashed right after they land,
// so they are read from cache, not DRAM.
//
// Contract: one job at a time, driven by one thread (begin, landed..., finish or abandon). The
// helper reads the buffer only between begin() and the return of finish()/abandon(); bytes
// below an announced prefix must not change until then. landed() prefixes never decrease.
//
// The helper thread starts with the first job and stays awake (yielding) for a short while
// after each one, so that back-to-back jobs do not pay a wake-up each; then it sleeps until
// the next begin().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

struct XXH3_state_s;
typedef struct XXH3_state_s XXH3_state_t;

namespace weightcast {

class PipelinedHasher {
 public:
  PipelinedHasher() = default;
  ~PipelinedHasher();
  PipelinedHasher(const PipelinedHasher&) = delete;
  PipelinedHasher& operator=(const PipelinedHasher&) = delete;

  // Starts hashing `size` bytes at `data`, none of which has landed yet.
  void begin(const uint8_t* data, size_t size);
  // Bytes [0, prefix) are final. Cheap (one atomic store): call it after every chunk.
  void landed(size_t prefix);
  // Waits until the whole buffer has landed and been hashed; returns its XXH3-64.
  // Requires landed(size) first.
  uint64_t finish();
  // Stops the job: once this returns, the helper no longer reads the buffer.
  void abandon();

 private:
  void run();
  void hash_job(XXH3_state_t* state);  // digest_ set unless cancelled

  std::mutex mu_;
  std::condition_variable wake_;
  std::thread thread_;
  bool stop_ = false;  // under mu_

  // The current job. data_/size_ are written by begin() before job_ is released.
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::atomic<uint64_t> job_{0};       // incremented by begin(); the helper waits for a change
  std::atomic<size_t> landed_{0};      // filled prefix, from the filling thread
  std::atomic<bool> cancel_{false};    // abandon() asks the helper to stop early
  std::atomic<uint64_t> done_job_{0};  // last job the helper has finished with
  uint64_t digest_ = 0;                // valid once done_job_ == job_ (released by done_job_)
};

}  // namespace weightcast
