// One worker thread that runs the encoding hooked writes leave behind (DeltaRecorder::
// record_write with an encoder), so that a write returns once its values are compared and
// copied (change_capture.h) and the delta chunks are encoded while the trainer goes on.
//
// The captures live in a fixed set of slots of slot_bytes() each: the memory is bounded
// (slots x slot_bytes, touched as used) whatever the trainer's pace, and a writer that finds
// every slot taken waits for the worker (back-pressure), so a slow encoder slows the writes
// instead of growing. Like ThreadPool (thread_pool.h), it is owned by the caller and passed in.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace weightcast {

class DeferredEncoder {
 public:
  DeferredEncoder(size_t slots, size_t slot_bytes);
  // Runs every task submitted, then stops the worker.
  ~DeferredEncoder();
  DeferredEncoder(const DeferredEncoder&) = delete;
  DeferredEncoder& operator=(const DeferredEncoder&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }

  // A free slot of slot_bytes() (uninitialised), waiting while every slot is taken.
  uint8_t* acquire();
  // Runs task on the worker, in submission order; the slot is free again once it returned.
  // task must not throw.
  void submit(uint8_t* slot, std::function<void()> task);
  // Returns once every task submitted so far has run.
  void drain();

 private:
  void worker_loop();

  const size_t slot_bytes_;
  std::vector<std::unique_ptr<uint8_t[]>> storage_;
  std::mutex mu_;
  // Woken only when someone waits on it: a submit does not wake a busy worker, a finished task
  // wakes no writer unless one waits for a slot or a drain (a wake is a system call).
  std::condition_variable work_, progress_;
  bool worker_idle_ = false;
  size_t waiters_ = 0;
  std::deque<uint8_t*> free_;
  std::deque<std::pair<uint8_t*, std::function<void()>>> queue_;
  size_t running_ = 0;
  bool stop_ = false;
  std::thread worker_;  // last: started once the rest exists
};

}  // namespace weightcast
