// Which ranks form the NCCL communicator of each membership epoch (issue 9, DESIGN §5-§6).
//
// The coordinator keeps one NcclEpochs. Ranks that can use NCCL join (their Hello lists nccl)
// and leave (Leave, or dropped as dead). A communicator cannot change its members, so any
// change of membership ends the epoch: the next version the coordinator offers starts a new
// one, whose members then build a new communicator (the first publisher makes the
// ncclUniqueId; it travels over the control plane). A rank that joined in between, or whose
// epoch ended, takes the filesystem or UCX path until an epoch includes it: the live stream
// never waits for a communicator to form. Pure bookkeeping: no NCCL, no sockets.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace weightcast {

struct NcclEpoch {
  uint64_t epoch = 0;         // 1, 2, ...
  uint64_t from_version = 0;  // the first version it carries
  // Group ranks in NCCL rank order: publishers first (ascending), then subscribers
  // (ascending); NCCL rank 0 makes the ncclUniqueId.
  std::vector<uint32_t> ranks;
  uint32_t publishers = 0;  // how many of `ranks` are publishers

  // The NCCL rank of group rank `rank`, if it is a member.
  std::optional<int> nccl_rank(uint32_t rank) const;
};

class NcclEpochs {
 public:
  void joined(uint32_t rank, bool publisher);
  void left(uint32_t rank);

  // Called before offering `version`. When membership changed since the epoch in force (or
  // none is in force), starts and returns a new epoch from `version` if the members include a
  // publisher and a subscriber; otherwise ends the epoch in force and returns nullopt.
  // Versions must not decrease.
  std::optional<NcclEpoch> begin_version(uint64_t version);

  // The epoch in force, if any.
  const NcclEpoch* current() const { return current_ ? &*current_ : nullptr; }
  // Whether `rank` receives `version` over NCCL: it is a subscriber of the epoch in force and
  // the epoch started at or before `version`.
  bool over_nccl(uint32_t rank, uint64_t version) const;

 private:
  std::map<uint32_t, bool> members_;  // group rank -> publisher
  bool changed_ = true;
  uint64_t next_epoch_ = 1;
  std::optional<NcclEpoch> current_;
};

}  // namespace weightcast
