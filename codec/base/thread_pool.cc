#include "codec/base/thread_pool.h"

namespace weightcast {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (size_t i = 0; i + 1 < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_indices(const std::function<void(size_t)>* job, size_t n) {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) return;
    (*job)(i);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  const std::function<void(size_t)>* job = nullptr;
  size_t n = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
      job = job_;
      n = job_size_;
    }
    run_indices(job, n);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  {
    // A worker still inside the previous call's loop must leave before next_ is reset.
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_ == 0; });
    job_ = &fn;
    job_size_ = n;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  wake_.notify_all();
  run_indices(&fn, n);
  // Workers that woke late find no index left and leave at once; wait for those inside.
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
}

}  // namespace weightcast
