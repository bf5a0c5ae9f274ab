// An in-process BroadcastGroup (broadcast_group.h) among threads of one process: the collective
// the CPU tests run everything above NCCL on (the round framing, the broadcast Transport, the
// rank group's live path), with the same contracts as the NCCL group.
//
// How it behaves, beyond broadcast_group.h's contracts:
//  * groups are found through a process-wide registry keyed by id; join() blocks until `ranks`
//    members joined the id (a join with another size, or a rank that already joined, fails);
//  * broadcast() is a rendezvous per call: the last member to arrive checks that every member
//    passes the same parts (count, sizes, owners) and spans of the right sizes, then copies
//    every part from its owner's source into every member's non-empty destination, and only
//    then are all members released; so an owner's sources are read only while it waits in
//    broadcast(), and a member leaves a call only after every copy of it is done;
//  * `sources` and `destinations` hold one span per part, or are empty (no part owned, or no
//    part wanted); bytes are host memory;
//  * the group breaks on a deadline (in a call, or a call made with a deadline already past),
//    on abort(), on a mismatch between members, or when a member is destroyed ("member N left
//    the group"): every member's current and later calls fail with that first error, prefixed
//    with "loopback group '<id>' of <size> is broken: " and the caller's rank. Codes: deadline
//    kDeadlineExceeded, mismatch kInvalidArgument, abort and a member leaving kIoError.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/nccl/broadcast_group.h"

namespace weightcast::nccl {

class LoopbackBroadcastGroupFactory final : public BroadcastGroupFactory {
 public:
  std::string name() const override { return "loopback"; }

  // "loopback-<counter>-<random hex>": unique within the process and across runs.
  Result<std::string> make_id() override;

  Result<std::unique_ptr<BroadcastGroup>> join(const std::string& id, int ranks, int rank,
                                               Deadline deadline) override;
};

// All `ranks` members of a fresh group at once, member i being rank i: for tests and
// single-process embeddings that hand the members to threads they start afterwards.
[[nodiscard]] Result<std::vector<std::unique_ptr<BroadcastGroup>>> make_loopback_group(int ranks);

// What a test waits on instead of sleeping (the event, not a guess at its time): how many
// members of `member`'s group wait in broadcast() now (0 for a member of another kind), and
// how many members have joined the pending id `id` and wait in join() (0 once complete).
int loopback_members_in_broadcast(const BroadcastGroup& member);
int loopback_members_joining(const std::string& id);

}  // namespace weightcast::nccl
