// Exact deduplication of tensors (ARCHITECTURE.md §4): tensors are the same storage when dtype,
// shape and every byte are equal. Fingerprints (dtype, shape, XXH3-128 of the bytes) group
// candidates; a byte compare confirms each match, so +0.0 and -0.0 stay different, NaN
// payloads are kept, and a hash collision can never merge different tensors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

class ThreadPool;

struct DedupStats {
  uint64_t keys = 0;
  uint64_t logical_bytes = 0;  // sum over keys
  uint64_t unique_storages = 0;
  uint64_t unique_bytes = 0;  // sum over unique storages
};

struct DedupResult {
  // storage_of[i]: index of tensor i's unique storage. Storages are numbered in order of
  // first appearance; representative[s] is the first tensor holding storage s.
  std::vector<uint32_t> storage_of;
  std::vector<uint32_t> representative;
  DedupStats stats;
};

struct DedupTimings {
  double fingerprint_s = 0;  // hashing every key (on the pool when given)
  double confirm_s = 0;      // grouping and byte compares
};

// Fails only on more than 2^32 - 1 tensors. Hashing runs on `pool` when given.
Result<DedupResult> deduplicate(std::span<const TensorBytesView> tensors,
                                ThreadPool* pool = nullptr, DedupTimings* timings = nullptr);

}  // namespace weightcast
