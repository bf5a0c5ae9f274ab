// `weightcast bench coalesce`: per-slice against coalesced staging of packed experts in host
// memory, next to one plain memcpy of the same total bytes, measured in the same run.
#pragma once

#include <nlohmann/json.hpp>

#include "codec/status.h"

namespace weightcast {

struct CoalesceBenchmarkConfig {
  int experts = 64;     // per packed parameter; expert sizes cycle through 2, 4, 8, 16 MiB
  int repetitions = 3;  // best of
  size_t threads = 1;
};

Result<nlohmann::json> run_coalesce_benchmark(const CoalesceBenchmarkConfig& config);

}  // namespace weightcast
