// One NCCL communicator of a membership epoch, with a deadline on everything.
//
// The coordinating rank makes an ncclUniqueId (make_id) that travels over the control plane;
// every rank of the epoch then join()s with it. The communicator is non-blocking
// (ncclConfig_t.blocking = 0), so neither the init nor a collective can hang a caller: each is
// polled (ncclCommGetAsyncError, cudaEventQuery) until it completes, fails, or its deadline
// passes. On a deadline or an asynchronous error the communicator is aborted (ncclCommAbort)
// and every later call fails at once with the first error; the next epoch builds a new one.
//
// Threads: one thread at a time uses a communicator (every call but request_abort). Another
// thread stops it with request_abort(): the using thread's polling loops (settle, wait) and
// enqueue_broadcast see the request and perform the ncclCommAbort themselves, so the object's
// fields and the ncclComm_t are only ever touched by one thread.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "codec/base/status.h"
#include "transport/nccl/nccl_library.h"

namespace weightcast::nccl {

class NcclCommunicator {
 public:
  static Result<ncclUniqueId> make_id();

  // Joins the epoch's communicator as `rank` of `ranks` on CUDA device `device`. Errors name
  // the rank and the epoch's size; a deadline aborts the half-made communicator.
  static Result<std::unique_ptr<NcclCommunicator>> join(const ncclUniqueId& id, int ranks, int rank,
                                                        int device,
                                                        std::chrono::milliseconds deadline);
  ~NcclCommunicator();  // finalizes a healthy communicator, aborts a failed one
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Enqueues a broadcast of `bytes` bytes from `root`'s `buffer` into every rank's `buffer`
  // (in place) on `stream`, then records `done` on it. Returns once NCCL accepted the
  // operation (or the deadline passed: the communicator is then aborted).
  Status enqueue_broadcast(void* buffer, size_t bytes, int root, cudaStream_t stream,
                           cudaEvent_t done, std::chrono::steady_clock::time_point deadline);
  // Waits for `done`, watching the communicator's asynchronous error; aborts on either
  // failure or the deadline.
  Status wait(cudaEvent_t done, std::chrono::steady_clock::time_point deadline);
  // enqueue_broadcast + wait.
  Status broadcast(void* buffer, size_t bytes, int root, cudaStream_t stream,
                   std::chrono::milliseconds deadline);

  // Aborts now (idempotent); later calls fail with `why`. On the using thread only.
  void abort(const std::string& why);
  // Thread-safe, from any thread at any time: asks the using thread to abort with `why` (the
  // first request's reason wins). A wait in progress returns within one poll (~50 us) with the
  // failure; if nothing is in progress, the next call (or the destructor) aborts.
  void request_abort(const std::string& why);
  bool abort_requested() const { return abort_requested_.load(std::memory_order_acquire); }
  bool aborted() const { return comm_ == nullptr && !failure_.ok(); }
  const Status& failure() const { return failure_; }
  int rank() const { return rank_; }
  int size() const { return ranks_; }
  int device() const { return device_; }
  const NcclLibrary& library() const { return *lib_; }

 private:
  NcclCommunicator() = default;
  // Polls until the communicator leaves ncclInProgress; fails (and aborts) on an error or the
  // deadline. `what` names the operation in errors.
  Status settle(const std::string& what, std::chrono::steady_clock::time_point deadline);
  std::string who() const;
  // Performs a pending request_abort (returns true and leaves failure_ set), else false.
  bool take_abort_request();

  const NcclLibrary* lib_ = nullptr;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, ranks_ = 0, device_ = 0;
  Status failure_;
  std::atomic<bool> abort_requested_{false};
  std::mutex request_mu_;    // guards request_why_
  std::string request_why_;  // the first request_abort's reason
};

}  // namespace weightcast::nccl
