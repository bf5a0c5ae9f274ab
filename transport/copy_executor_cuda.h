// Running a copy plan whose sources are CUDA device memory: each transfer is one
// cudaMemcpyAsync (device to host) into pinned staging on a stream of its own device, with an
// event recorded after each transfer; wait() blocks until every event completed or the
// deadline passes. Built when the CUDA toolkit is present (WEIGHTCAST_HAVE_CUDA); it needs a
// GPU only to run.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/copy_planner.h"
#include "codec/status.h"
#include "transport/copy_executor.h"

namespace weightcast {

// Whether a CUDA device can be used here; `why` says why not.
bool cuda_device_usable(std::string* why);

class CudaStagedCopies {
 public:
  ~CudaStagedCopies();  // waits for outstanding copies, then frees the pinned staging
  CudaStagedCopies(const CudaStagedCopies&) = delete;
  CudaStagedCopies& operator=(const CudaStagedCopies&) = delete;

  // Blocks until every transfer finished; errors (sticky) name the failed transfer.
  Status wait(std::chrono::milliseconds deadline);
  // The bytes of request `i`; valid after a successful wait().
  std::span<const uint8_t> slice(size_t request) const;
  size_t transfer_calls() const;

  struct Impl;
  explicit CudaStagedCopies(std::unique_ptr<Impl> impl);

 private:
  friend Result<std::unique_ptr<CudaStagedCopies>> execute_copy_plan_cuda(
      const CopyPlan&, std::span<const CopyRequest>, std::span<const uint8_t* const>, int,
      const CancelToken*);
  std::unique_ptr<Impl> impl_;
};

// `device_sources[s]` is the base of source allocation s in the memory of CUDA device
// `device`. Enqueues every transfer and returns at once; a cancelled token stops enqueueing
// (the result then reports cancellation from wait() and frees its staging when destroyed).
Result<std::unique_ptr<CudaStagedCopies>> execute_copy_plan_cuda(
    const CopyPlan& plan, std::span<const CopyRequest> requests,
    std::span<const uint8_t* const> device_sources, int device,
    const CancelToken* cancel = nullptr);

}  // namespace weightcast
