// One thread that runs posted tasks one at a time, in the order they were posted: the worker
// of the publisher (its publications) and of the NCCL live path (its joins and rounds).
//
// Contract: a task runs on the executor's thread and must not throw or call stop(). After
// stop() begins, post() refuses new tasks; the task running finishes; what is still queued
// runs (OnStop::kRunQueued: each queued task still ends, e.g. marking its handle done) or is
// dropped (kDropQueued: nothing waits on queued tasks); then the thread is joined. The owner
// makes its tasks return promptly once it is stopping (a flag of its own they check), so stop
// returns in bounded time. The destructor stops with the mode given at construction.
//
// Why not the ThreadPool (thread_pool.h): that one runs one data-parallel loop to completion
// for its caller; this one is a queue whose caller does not wait.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace weightcast {

class SerialExecutor {
 public:
  enum class OnStop { kRunQueued, kDropQueued };

  explicit SerialExecutor(OnStop on_stop);
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Queues `task`; false (and `task` dropped) once stop() has begun.
  [[nodiscard]] bool post(std::function<void()> task);
  // Tasks queued or running.
  size_t pending() const;
  // Stops as the contract above says; idempotent, and safe from several threads.
  void stop();

 private:
  void loop();

  const OnStop on_stop_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;
  bool stopping_ = false;
  std::mutex join_mu_;  // one joiner at a time
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace weightcast
