// The target of `weightcast bench group --publisher-mode fp8`: an FP8 group's run (the same
// demo model, seed and versions, its linear projections published as block FP8:
// src/endpoint/publisher_fp8.cc) against the bf16 snapshot run of the same transport
// (docs/PERFORMANCE.md, "FP8"). Both runs publish the same trainer steps, so version v of
// one is version v of the other.
//
// Appended to the FP8 run's "targets", its bound multiplied by `slack`:
//   fp8_delta_bytes_vs_bf16   the bytes of every version both runs published as a delta
//                             (part files written to the journal), FP8 run over bf16 run,
//                             <= fp8_bytes_factor (the third seed measured 0.40 on its
//                             DeepGEMM engine).
// The FP8 run also gets "fp8": {compared_with, delta_versions, fp8_delta_bytes,
// bf16_delta_bytes, delta_ratio, fp8_anchor_bytes, bf16_anchor_bytes, anchor_ratio}.
#pragma once

#include <nlohmann/json.hpp>

#include "bench/drivers/group_bench_targets.h"

namespace weightcast {

// `bf16` and `fp8` are summaries (summarize_group_run) with "label".
void compare_fp8_run(const nlohmann::json& bf16, nlohmann::json* fp8,
                     const GroupBenchBounds& bounds);

}  // namespace weightcast
