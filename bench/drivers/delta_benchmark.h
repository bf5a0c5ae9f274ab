// The sparse delta benchmark behind `weightcast bench delta` and `make bench`: encode and
// apply a synthetic Adam-bf16 update and compare each time with one full scan of the same
// pair of buffers (memcmp of the old buffer against an identical copy, which cannot stop
// early), measured in the same run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "codec/base/status.h"

namespace weightcast {

struct DeltaBenchmarkConfig {
  double density = 0.01;
  uint64_t elements = uint64_t{1} << 26;
  size_t threads = 1;
  uint32_t chunk_elements = 1u << 16;
  int repetitions = 5;  // each time is the best of this many runs
  uint64_t seed = 1;
  int64_t fan_in = 2048;
};

// Runs the benchmark and returns one JSON object with at least density, changed,
// encoded_bytes, bits_per_change, encode_s, apply_s, memcmp_s, encode_vs_memcmp and
// apply_vs_memcmp. Fails if the applied result differs from the new version.
Result<nlohmann::json> run_delta_benchmark(const DeltaBenchmarkConfig& config);

}  // namespace weightcast
