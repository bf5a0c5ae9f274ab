// Running a copy plan (codec/copy_planner.h) on host memory: each transfer is copied once
// into staging storage the result owns, on a thread pool; every request then reads its bytes
// as a slice of its transfer. Slices stay valid after the sources change or go away.
// (The CUDA executor, cudaMemcpyAsync into pinned staging, is part of issue 4 still open.)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codec/copy_planner.h"
#include "codec/status.h"

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

 private:
  friend Result<StagedCopies> execute_copy_plan(const CopyPlan&, std::span<const CopyRequest>,
                                                std::span<const uint8_t* const>, ThreadPool*,
                                                const CancelToken*);
  std::vector<std::unique_ptr<uint8_t[]>> staging_;
  std::vector<uint64_t> staging_bytes_;
  std::vector<std::span<const uint8_t>> slices_;
};

// `sources[s]` is the base of source allocation s (host memory). Checks every request lies in
// its source (errors name the request), copies each transfer once (large ones in pieces on the
// pool), and returns the staged slices. A cancelled token makes it return kFailedPrecondition
// ("cancelled") with all staging freed.
Result<StagedCopies> execute_copy_plan(const CopyPlan& plan, std::span<const CopyRequest> requests,
                                       std::span<const uint8_t* const> sources,
                                       ThreadPool* pool = nullptr,
                                       const CancelToken* cancel = nullptr);

}  // namespace weightcast
