// One member's end of a membership epoch's broadcast group (ARCHITECTURE.md §5): the
// collective the NCCL transport is built on, behind an interface so that everything above it
// (the round framing, the broadcast transport of the tests, the rank group's live path) is the same
// code over NCCL on GPUs (nccl_broadcast_group.h) and over the in-process loopback group the CPU
// tests use (loopback_broadcast_group.h).
//
// Contracts every implementation keeps:
//  * a group has `size()` members, ranks 0..size-1, fixed for its life (an epoch);
//  * broadcast() is collective: every member calls it with the same parts (sizes, owners) in
//    the same order of calls; part i's bytes come from `sources[i]` on its owner and land in
//    `destinations[i]` on every member that passes a non-empty span there (its size must be
//    the part's); a member may pass empty spans for the parts it does not need, or an empty
//    list of sources or destinations for none at all;
//  * sources and destinations may be host memory or, for groups on a GPU, device memory;
//  * every call ends by its deadline: on a deadline, a peer's failure or abort() the group is
//    broken and every later call fails at once with kUnavailable naming the first error;
//  * abort() may be called from any thread, also while broadcast() waits on another.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "codec/base/status.h"
#include "transport/nccl/broadcast_schedule.h"
#include "transport/transport.h"  // Deadline

namespace weightcast::nccl {

class BroadcastGroup {
 public:
  virtual ~BroadcastGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // One collective round over `parts` (see the contracts above). Errors name the part or
  // bucket, the group's size and this rank.
  [[nodiscard]] virtual Status broadcast(std::span<const SchedulePart> parts,
                                         std::span<const std::span<const uint8_t>> sources,
                                         std::span<const std::span<uint8_t>> destinations,
                                         Deadline deadline) = 0;

  // Breaks the group now (idempotent); a broadcast() waiting elsewhere returns `why`.
  virtual void abort(const std::string& why) = 0;
};

// Makes groups: the member that will be rank 0 makes an id, which travels to every member
// over the control plane; each then joins with it.
class BroadcastGroupFactory {
 public:
  virtual ~BroadcastGroupFactory() = default;

  // "nccl" or "loopback": for logs and errors.
  virtual std::string name() const = 0;

  // A fresh group id (opaque bytes; an ncclUniqueId for NCCL).
  [[nodiscard]] virtual Result<std::string> make_id() = 0;

  // Joins group `id` as `rank` of `ranks`; returns once every member joined, or fails by
  // `deadline` (a member that never comes) naming the rank and the group's size.
  [[nodiscard]] virtual Result<std::unique_ptr<BroadcastGroup>> join(const std::string& id,
                                                                     int ranks, int rank,
                                                                     Deadline deadline) = 0;
};

}  // namespace weightcast::nccl
