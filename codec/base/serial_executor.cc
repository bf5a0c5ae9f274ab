#include "codec/base/serial_executor.h"

#include <utility>

namespace weightcast {

SerialExecutor::SerialExecutor(OnStop on_stop) : on_stop_(on_stop) {
  thread_ = std::thread([this] { loop(); });
}

SerialExecutor::~SerialExecutor() {
  stop();
}

bool SerialExecutor::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t SerialExecutor::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + (running_ ? 1 : 0);
}

void SerialExecutor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (on_stop_ == OnStop::kDropQueued) queue_.clear();
  }
  cv_.notify_one();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void SerialExecutor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    task();
    task = nullptr;  // what the task captured goes before the next runs
    lock.lock();
    running_ = false;
  }
}

}  // namespace weightcast
