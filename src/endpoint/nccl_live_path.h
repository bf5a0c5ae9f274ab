// The nccl live path (src/endpoint/live_path.h; the epoch protocol and the rounds are
// NcclLive's, src/endpoint/nccl_live.h). The server serves a version only while an epoch is
// ready: it queues the version's round in that epoch and returns an NcclDescriptor naming it
// (control.proto); with no ready epoch the descriptor is empty and the version goes by the
// group's other paths. The coordinator forwards the descriptor only to the epoch's members
// while it is in force and ready (src/control/coordinator_nccl.cc); a fetcher enters the round
// when the Offer arrives (on_offer) and fetch() waits for the round's outcome, at most the
// round's nccl.timeout_ms plus a second. A round without parts, or one forgotten meanwhile
// (a Recover), is kNotFound: the journal then carries the version.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "codec/base/status.h"
#include "src/endpoint/live_path.h"
#include "transport/nccl/broadcast_group.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

// Makes the groups a rank's nccl path uses, for the group's nccl section.
using NcclGroupsMaker = std::function<Result<std::unique_ptr<nccl::BroadcastGroupFactory>>(
    const proto::NcclConfig& config)>;

// The path named "nccl" on `groups` (default: make_nccl_groups, NCCL on CUDA device 0;
// tests: the loopback group); `memory_kinds` is what its groups broadcast through (default:
// cuda). Viable when `groups` makes a factory here (a usable GPU and a loadable NCCL).
std::shared_ptr<const LivePath> nccl_live_path(NcclGroupsMaker groups = {},
                                               std::vector<MemoryKind> memory_kinds = {
                                                   MemoryKind::kCuda});

}  // namespace weightcast
