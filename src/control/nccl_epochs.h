// Which ranks form the NCCL communicator of each membership epoch, and how far it has formed
// (docs/DECISIONS.md "NCCL transport").
//
// The coordinator keeps one NcclEpochs. Ranks that can use NCCL join (their Hello lists nccl)
// and leave (Leave, dropped as dead, or a failure to form a communicator). A communicator
// cannot change its members, so a change of membership ends the epoch at the next version
// the coordinator offers, and a new epoch starts forming:
//   1. NCCL rank 0 (the first publisher) makes the group id (set_group_id);
//   2. every member joins the communicator with it (member_joined), and when all have,
//   3. the epoch is ready: the publisher broadcasts the versions it offers after that, and
//      the coordinator tells the epoch's subscribers to receive them (over_nccl).
// A rank that joined in between, or whose epoch ended, takes the filesystem or UCX path until
// an epoch includes it: the live stream never waits for a communicator to form. The epoch in
// force also ends at once when one of its members leaves or says Hello again (it restarted and
// lost its communicator), or on a failure (end()). Pure bookkeeping: no NCCL, no sockets.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace weightcast {

// The nccl live path's name: in the group config's `transports`, Hello, Welcome, an Offer's
// live_descriptors and an Ack's transport.
inline constexpr std::string_view kNcclPath = "nccl";

// The nccl live path's descriptor (control.proto NcclDescriptor) naming `epoch`, and back:
// nullopt for bytes that are not one, or name epoch 0.
std::string nccl_descriptor(uint64_t epoch);
std::optional<uint64_t> nccl_descriptor_epoch(const std::string& descriptor);

struct NcclEpoch {
  uint64_t epoch = 0;         // 1, 2, ...
  uint64_t from_version = 0;  // the version whose offer started it forming
  // Group ranks in NCCL rank order: the publisher of lowest rank, then the subscribers
  // (ascending). NCCL rank 0 makes the group id and roots every broadcast; other publishers
  // (a group rarely has more than one) are left out, since every member of a communicator
  // must take part in each of its broadcasts.
  std::vector<uint32_t> ranks;
  uint32_t publishers = 0;    // how many of `ranks` are publishers (0 or 1)
  std::string group_id;       // once NCCL rank 0 made it
  std::set<uint32_t> joined;  // members that joined the communicator
  bool ready = false;         // every member joined

  // The NCCL rank of group rank `rank`, if it is a member.
  std::optional<int> nccl_rank(uint32_t rank) const;
};

class NcclEpochs {
 public:
  // A rank that can use NCCL said Hello. When it is a member of the epoch in force it
  // restarted, so that epoch ends: it is returned, so its members can be told.
  std::optional<NcclEpoch> joined(uint32_t rank, bool publisher);
  // A rank left, died, or could not form a communicator: no later epoch includes it until it
  // joins again. Returns the epoch in force when the rank was in it (that epoch ends).
  std::optional<NcclEpoch> left(uint32_t rank);
  // Ends the epoch in force (a broadcast failed, formation took too long); the next
  // begin_version starts a new one with the same members. Returns it, if one was in force.
  // `failure` counts towards the suspension below.
  std::optional<NcclEpoch> end(bool failure = true);
  // A version arrived over the epoch in force: the failures in a row are forgotten.
  void carried();
  // After kMaxFailedEpochs epochs in a row ended by failure without carrying a version, no
  // epoch forms until membership changes (a join or a leave): a fault that outlives epochs
  // (a broken link, a misconfigured NCCL) would otherwise cost one deadline per version.
  static constexpr uint32_t kMaxFailedEpochs = 3;
  bool suspended() const { return failures_in_a_row_ >= kMaxFailedEpochs; }

  // Called when `version` is offered. When membership changed (or an epoch ended) since the
  // epoch in force started, starts and returns a new, forming epoch if the members include a
  // publisher and a subscriber; otherwise returns nullopt and the epoch in force (if any)
  // goes on.
  std::optional<NcclEpoch> begin_version(uint64_t version);

  // NCCL rank 0 of epoch `epoch` made its group id; false when `epoch` is not the one in force.
  bool set_group_id(uint64_t epoch, const std::string& group_id);
  // Member `rank` joined epoch `epoch`'s communicator; true when that made the epoch ready.
  bool member_joined(uint64_t epoch, uint32_t rank);

  // The epoch in force (forming or ready), if any.
  const NcclEpoch* current() const { return current_ ? &*current_ : nullptr; }
  // Whether `rank` receives a version its publisher broadcasts in `epoch`: that epoch is the
  // one in force and ready, and `rank` is one of its subscribers.
  bool over_nccl(uint32_t rank, uint64_t epoch) const;

 private:
  std::optional<NcclEpoch> end_if_member(uint32_t rank);

  std::map<uint32_t, bool> members_;  // group rank -> publisher
  bool changed_ = true;
  uint32_t failures_in_a_row_ = 0;
  uint64_t next_epoch_ = 1;
  std::optional<NcclEpoch> current_;
};

}  // namespace weightcast
