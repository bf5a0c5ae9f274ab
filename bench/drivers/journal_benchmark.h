// `weightcast bench journal`: what the filesystem journal costs, each figure beside its
// reference from the same run.
//  * anchor write throughput vs a raw sequential write + fsync of the same bytes (1, 2, 4
//    writer threads; bench/drivers/anchor_benchmark.h);
//  * delta step publication latency (encode + write + fsync + HEAD) for a 1 %-density Adam
//    update of a synthetic bf16 model, with the anchor write of the same model beside it;
//  * catch-up time of a fresh reader from an anchor over `deltas` deltas (the reader's bytes
//    are compared with the publisher's at the end).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "codec/base/status.h"

namespace weightcast {

struct JournalBenchmarkConfig {
  std::string dir = "/tmp";             // a scratch journal is made (and removed) in it
  uint64_t parameters = 1'000'000'000;  // bf16 elements of the synthetic model
  uint64_t tensors = 32;                // the model's tensors (equal sizes)
  double density = 0.01;
  uint64_t deltas = 10;  // deltas after the anchor, for the catch-up figure
  size_t threads = 2;
  bool zstd = false;
  uint64_t anchor_bench_bytes = uint64_t{2} << 30;  // 0 skips the anchor throughput part
  int repetitions = 2;
  std::function<void(const std::string&)> log;
};

Result<nlohmann::json> run_journal_benchmark(const JournalBenchmarkConfig& config);

}  // namespace weightcast
