// Coalescing copies (ARCHITECTURE.md §4): a list of region copy requests becomes a plan of
// transfers, each one contiguous source range copied once; every request then reads its bytes as a
// slice of its transfer. Pure: nothing is copied here (transport/copy_executor.h runs plans).
//
// The rule, from the "coalesce packed-expert checkpoint copies" seed: a run of requests is
// merged only when it is complete (it covers its whole source allocation, e.g. all experts of
// a packed [E, ...] parameter), its requests are consecutive in the request list, contiguous
// and in order in the source, and of one dtype and shape. Sparse subsets, reordered or
// interleaved requests and mismatched shapes or dtypes keep one transfer per request; the
// plan records why for every request.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/dtype.h"

namespace weightcast {

struct CopyRequest {
  std::string name;           // the destination tensor's name (for logs and errors)
  uint32_t source = 0;        // which source allocation (the caller's numbering)
  uint64_t source_bytes = 0;  // size of that whole allocation
  uint64_t offset = 0;        // bytes from the allocation's start
  uint64_t bytes = 0;         // one contiguous range
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

enum class MergeDecision : uint8_t {
  kMerged,         // part of a coalesced transfer
  kIncomplete,     // its run does not cover the whole source (a sparse subset)
  kReordered,      // it does not start where the previous request of its source ended
  kInterleaved,    // requests of another source come between it and its neighbours
  kShapeMismatch,  // dtype or shape differs from its run
  kSingle,         // the only request of its source: nothing to merge with
};
const char* merge_decision_name(MergeDecision decision);

struct PlannedTransfer {
  uint32_t source = 0;
  uint64_t offset = 0;  // source range [offset, offset + bytes)
  uint64_t bytes = 0;
  std::vector<uint32_t> requests;  // the requests it serves, in order
};

struct RequestSlice {
  uint32_t transfer = 0;
  uint64_t offset = 0;  // within the transfer's bytes
  MergeDecision decision = MergeDecision::kSingle;
};

struct CopyPlan {
  std::vector<PlannedTransfer> transfers;
  std::vector<RequestSlice> slices;  // one per request, in request order
  uint64_t total_bytes = 0;
};

// Plans `requests`; every request gets exactly one slice. Requests are assumed valid ranges
// of their sources (offset + bytes <= source_bytes); the executor checks that.
CopyPlan plan_copies(std::span<const CopyRequest> requests);

// One transfer per request: the per-slice path, for comparisons and fallbacks.
CopyPlan plan_per_slice(std::span<const CopyRequest> requests);

}  // namespace weightcast
