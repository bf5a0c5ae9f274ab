// weightcastd's publisher rank when the group config lists several publisher ranks: each rank
// is one shard of an FSDP-like trainer (src/endpoint/shard_publisher.h). Every rank builds the
// demo model (the synthetic trainer's own memory: it cannot step a part of it), owns an even
// share of its elements in flat order (ranges that start and end mid-tensor), and publishes
// only those; no rank gathers the model. A failed version is logged and the rank goes on with
// the next (the lead's next version is then an anchor). A rank that restarts joins the version
// the lead is on (rank_plan.h newest_rank_plan), else the one after the journal's head. With
// demo.figures_path (a bench run) every rank steps its model for a version only once its last
// one is committed (or the lead went past it), as the lead does, so that no training step runs
// beside the engines' apply on a shared machine; and every rank stays after the last version
// until it is stopped, so that the bench reads its peak RSS (only the lead's is in an offer).
#pragma once

#include <cstdint>
#include <vector>

#include "codec/base/status.h"
#include "src/daemon/rank_roles.h"
#include "src/endpoint/shard_publisher.h"

namespace weightcast {

// Shard `shard` of `shards` of a model of `numels` elements in flat order: the elements
// [lo, hi) it owns, lo = floor(shard * total / shards), as (tensor index, first, count).
struct ShardSpan {
  size_t tensor = 0;
  uint64_t first = 0;
  uint64_t count = 0;
};
std::vector<ShardSpan> even_shard(const std::vector<uint64_t>& numels, uint32_t shard,
                                  uint32_t shards);

Status run_shard_publisher_rank(const proto::GroupConfig& config, const DaemonOptions& options,
                                const ShardPlace& place);

}  // namespace weightcast
