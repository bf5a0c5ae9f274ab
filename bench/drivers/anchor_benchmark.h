// `weightcast bench anchor`: write_anchor of a synthetic bf16 model against the physical limit
// of the same directory, a plain sequential write of the same bytes into one file with fsync,
// measured first in the same run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

struct AnchorBenchmarkConfig {
  std::string dir = "/tmp";                    // a scratch directory is made (and removed) in it
  uint64_t total_bytes = uint64_t{2} << 30;    // tensor bytes of the model
  uint64_t shard_bytes = uint64_t{512} << 20;  // AnchorWriteOptions::shard_bytes
  std::vector<size_t> threads{1, 2, 4};        // one anchor measurement per entry
  int repetitions = 3;                         // best of
};

// Returns {"bytes", "raw_sequential_write_s", "raw_GBps", "shard_bytes", "tensors",
// "anchor": [{"threads", "seconds", "GBps", "ratio_vs_raw"}, ...]}, ratio_vs_raw being the
// anchor's throughput over the raw write's (1.0 = as fast as one sequential stream). Every
// file written is removed, also on error.
Result<nlohmann::json> run_anchor_write_benchmark(const AnchorBenchmarkConfig& config);

}  // namespace weightcast
