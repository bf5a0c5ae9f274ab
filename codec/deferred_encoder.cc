#include "codec/deferred_encoder.h"

namespace weightcast {
namespace {

// Tasks queued before an idle worker is woken (a wake is a system call; a chunk's encoding
// takes tens of microseconds).
constexpr size_t kWakeBatch = 8;

}  // namespace

DeferredEncoder::DeferredEncoder(size_t slots, size_t slot_bytes)
    : slot_bytes_(slot_bytes), storage_(slots == 0 ? 1 : slots) {
  for (auto& s : storage_) {
    s.reset(new uint8_t[slot_bytes_]);  // default-initialised: pages are touched when used
    free_.push_back(s.get());
  }
  worker_ = std::thread([this] { worker_loop(); });
}

DeferredEncoder::~DeferredEncoder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_one();
  worker_.join();
}

uint8_t* DeferredEncoder::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  // The worker always makes progress on what is queued, so this wait ends.
  if (free_.empty()) {
    if (worker_idle_) work_.notify_one();
    ++waiters_;
    progress_.wait(lock, [&] { return !free_.empty(); });
    --waiters_;
  }
  // The slot freed longest ago: the one just freed has its lines in the worker's cache, and
  // writing it pulls each back across cores (measured: a third of the write's cost).
  uint8_t* slot = free_.front();
  free_.pop_front();
  return slot;
}

void DeferredEncoder::submit(uint8_t* slot, std::function<void()> task) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(slot, std::move(task));
    // An idle worker is woken for a batch, or before the writers could run out of slots.
    wake = worker_idle_ && (queue_.size() >= kWakeBatch || free_.size() <= storage_.size() / 2);
  }
  if (wake) work_.notify_one();
}

void DeferredEncoder::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  if (worker_idle_ && !queue_.empty()) work_.notify_one();
  ++waiters_;
  progress_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  --waiters_;
}

void DeferredEncoder::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    worker_idle_ = true;
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    worker_idle_ = false;
    if (queue_.empty()) return;  // stopping, and everything submitted ran
    auto [slot, task] = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    task();
    lock.lock();
    --running_;
    free_.push_back(slot);
    if (waiters_ > 0) progress_.notify_all();
  }
}

}  // namespace weightcast
