// `weightcast bench coalesce`: per-slice against coalesced staging of packed experts in host
// memory, next to one plain memcpy of the same total bytes, measured in the same run; each
// cold (fresh staging, fields per_slice_s, coalesced_s, memcpy_cold_s) and warm (staging reused
// from a StagingPool, *_warm_s; memcpy_s into a destination touched before).
#pragma once

#include <nlohmann/json.hpp>

#include "codec/base/status.h"

namespace weightcast {

struct CoalesceBenchmarkConfig {
  int experts = 64;     // per packed parameter; expert sizes cycle through 2, 4, 8, 16 MiB
  int repetitions = 3;  // best of
  size_t threads = 1;
};

Result<nlohmann::json> run_coalesce_benchmark(const CoalesceBenchmarkConfig& config);

}  // namespace weightcast
