// Running a copy plan (codec/copy_planner.h) on host memory: each transfer is copied once
// into staging storage the result owns, on a thread pool; every request then reads its bytes
// as a slice of its transfer. Slices stay valid after the sources change or go away, for as
// long as the result lives. Staging is fresh (pre-faulted) memory, or drawn from a
// StagingPool (transport/staging_pool.h) and returned to it when the result is destroyed.
// (transport/copy_executor_cuda.h runs plans whose sources are CUDA device memory.)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codec/base/status.h"
#include "codec/copy_planner.h"
#include "transport/staging_pool.h"

namespace weightcast {

class ThreadPool;

// Set from any thread to stop a running plan; the executor then frees its staging.
struct CancelToken {
  std::atomic<bool> cancelled{false};
};

class StagedCopies {
 public:
  StagedCopies() = default;
  // The bytes of request `i` of the plan that produced this.
  std::span<const uint8_t> slice(size_t request) const;
  size_t transfer_calls() const { return staging_.size(); }
  uint64_t staged_bytes() const;
  // Transfers whose staging was reused from a StagingPool (already faulted in).
  size_t reused_transfers() const;

 private:
  friend Result<StagedCopies> execute_copy_plan(const CopyPlan&, std::span<const CopyRequest>,
                                                std::span<const uint8_t* const>, ThreadPool*,
                                                const CancelToken*, StagingPool*);
  std::vector<StagingBuffer> staging_;  // one per transfer; returned to its pool on destruction
  std::vector<uint64_t> staging_bytes_;
  std::vector<std::span<const uint8_t>> slices_;
};

// `sources[s]` is the base of source allocation s (host memory). Checks every request lies in
// its source (errors name the request), copies each transfer once (large ones in pieces on the
// pool), and returns the staged slices. With `staging` set, each transfer's buffer comes from
// that pool (reused where one fits) and goes back to it when the result is destroyed; the pool
// may be shared by plans running concurrently. A cancelled token makes it return
// kFailedPrecondition ("cancelled") with all staging freed (or returned to `staging`).
Result<StagedCopies> execute_copy_plan(const CopyPlan& plan, std::span<const CopyRequest> requests,
                                       std::span<const uint8_t* const> sources,
                                       ThreadPool* pool = nullptr,
                                       const CancelToken* cancel = nullptr,
                                       StagingPool* staging = nullptr);

}  // namespace weightcast
