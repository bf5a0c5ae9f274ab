// A fixed pool of worker threads for data-parallel loops.
//
// Codec functions never start threads of their own: a caller that wants parallelism owns a
// ThreadPool and passes it in. parallel_for blocks until every index ran; the calling thread
// works too, so a pool of size N uses N threads in all (N - 1 workers plus the caller).
// One parallel_for runs at a time per pool; concurrent callers are serialised.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace weightcast {

class ThreadPool {
 public:
  // `threads` == 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Calls fn(i) once for every i in [0, n), spread over the pool; returns when all returned.
  // fn must not throw.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

 private:
  void worker_loop();
  void run_indices(const std::function<void(size_t)>* job, size_t n);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t job_size_ = 0;
  uint64_t generation_ = 0;
  std::atomic<size_t> next_{0};
  size_t active_ = 0;
  bool stop_ = false;
};

}  // namespace weightcast
