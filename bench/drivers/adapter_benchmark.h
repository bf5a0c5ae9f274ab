// The adapter benchmark behind `weightcast bench adapter`: the compact path against
// all-safetensors on the GLM-like shared-expert fixture, and the cost of the compact path's
// dedup on a dense (Qwen3-8B-like) adapter, each measured against its reference in one run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "codec/base/status.h"

namespace weightcast {

struct AdapterBenchmarkConfig {
  std::string work_dir;  // empty: a fresh temp directory, removed afterwards
  int repetitions = 2;   // best of
  size_t threads = 2;
  // 6144 keeps the real export's bytes per key (~500 KB logical, ~10 KB unique): the fixed
  // cost per key (its name in the pickle) then weighs what it weighs in production.
  int glm_hidden = 6144;
  int qwen_layers = 36;
};

Result<nlohmann::json> run_adapter_benchmark(const AdapterBenchmarkConfig& config);

}  // namespace weightcast
