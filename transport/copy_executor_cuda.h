// Running a copy plan whose sources are CUDA device memory: each transfer is one
// cudaMemcpyAsync (device to host) into pinned staging on a stream of its own device, with an
// event recorded after each transfer; wait() blocks until every event completed or the
// deadline passes. Built when the CUDA toolkit is present (WEIGHTCAST_HAVE_CUDA); it needs a
// GPU only to run.
//
// Cancellation: the plan's CancelToken is watched while transfers are enqueued and while
// wait() waits. Once it is seen set, the copies already enqueued are drained (a queued
// cudaMemcpyAsync cannot be withdrawn), then every pinned staging buffer is freed at once,
// not at destruction; wait() then reports kFailedPrecondition ("cancelled"). A wait() that
// succeeded is final: cancelling afterwards changes nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/base/status.h"
#include "codec/copy_planner.h"
#include "transport/copy_executor.h"

namespace weightcast {

// Whether a CUDA device can be used here; `why` says why not.
bool cuda_device_usable(std::string* why);

// Pinned staging bytes held by all CudaStagedCopies of this process (for leak checks/metrics).
uint64_t cuda_pinned_staging_bytes();

class CudaStagedCopies {
 public:
  ~CudaStagedCopies();  // waits for outstanding copies, then frees the pinned staging
  CudaStagedCopies(const CudaStagedCopies&) = delete;
  CudaStagedCopies& operator=(const CudaStagedCopies&) = delete;

  // Blocks until every transfer finished; errors (sticky) name the failed transfer. Returns
  // kFailedPrecondition, with the staging freed, once the plan's token is seen cancelled.
  Status wait(std::chrono::milliseconds deadline);
  // The bytes of request `i`; valid after a successful wait().
  std::span<const uint8_t> slice(size_t request) const;
  // cudaMemcpyAsync calls made (fewer than the plan's transfers when cancelled mid-plan).
  size_t transfer_calls() const;
  // Pinned staging this result holds now: 0 once cancelled (or never allocated).
  uint64_t pinned_bytes() const;

  struct Impl;
  explicit CudaStagedCopies(std::unique_ptr<Impl> impl);

 private:
  friend Result<std::unique_ptr<CudaStagedCopies>> execute_copy_plan_cuda(
      const CopyPlan&, std::span<const CopyRequest>, std::span<const uint8_t* const>, int,
      const CancelToken*);
  std::unique_ptr<Impl> impl_;
};

// `device_sources[s]` is the base of source allocation s in the memory of CUDA device
// `device`. Enqueues every transfer and returns at once. A cancelled token stops enqueueing
// and frees the staging (see Cancellation above); `cancel`, if given, must outlive the
// result's last wait().
Result<std::unique_ptr<CudaStagedCopies>> execute_copy_plan_cuda(
    const CopyPlan& plan, std::span<const CopyRequest> requests,
    std::span<const uint8_t* const> device_sources, int device,
    const CancelToken* cancel = nullptr);

}  // namespace weightcast
