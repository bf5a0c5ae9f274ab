// The figures of `weightcast bench group --publisher-mode ranks`: a group whose model is
// published by several publisher ranks, each from an even shard (src/daemon/shard_demo.h,
// src/endpoint/shard_publisher.h), against the single-publisher snapshot run of the same
// transport, model, seed, versions and engines (docs/PERFORMANCE.md, "Several publisher ranks
// in a group"). Both runs publish the same trainer steps, so version v of one is version v of
// the other.
//
// The ranks run gets "sharded": {compared_with, publishers, delta_versions (those both runs
// published as deltas and counted: every subscriber acked them and the version before),
// ranks_delta_ms and single_delta_ms (medians of publish -> all-acked over those versions),
// delta_ratio (the median of the per-version ratios, ranks over single), anchor_versions,
// ranks_anchor_ms, single_anchor_ms, anchor_ratio}. No bound: the issue that asks for it names
// none, and on one machine the ranks share its cores (the figure says what sharding costs or
// saves there).
#pragma once

#include <nlohmann/json.hpp>

namespace weightcast {

// `single` and `ranks` are summaries (summarize_group_run) with "label"; `publishers` is the
// ranks run's count of publisher ranks.
void compare_rank_run(const nlohmann::json& single, nlohmann::json* ranks, uint32_t publishers);

}  // namespace weightcast
