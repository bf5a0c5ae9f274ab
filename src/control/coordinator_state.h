// The coordinator's version state machine (docs/DECISIONS.md, "Rank group"), without sockets or
// files: messages and clock ticks go in, messages to send come out, so every rule is testable with
// a fake clock (tests/control/coordinator_state_test.cc) and the loop around it (coordinator.h)
// only moves frames and reads the journal's HEAD.
//
// Rules:
//  * Hello: the highest protocol both speak (none in common: refused, naming both ranges);
//    the rank must be in the config with that role; its paths (Welcome.transports) are the
//    config's transports its Hello lists too, in the config's order, up to "fs" (none:
//    refused). A subscriber holding the head is live, any other is sent to catch up from the
//    journal.
//  * Offer (from a publisher, or found in the journal): recorded with its checksums and sent
//    to every subscriber that is not dead, with the live descriptors of the paths it was
//    given (an opaque map by path name; the nccl one also only to its epoch's members).
//  * A version is committed when every live subscriber acked it, or a later version, with
//    checksums equal to the offer's. Commits are a watermark: committing v commits all
//    versions before it. With no live subscriber a version commits when offered.
//  * A live subscriber that nacks, acks wrong checksums, or leaves an offer unacked past
//    the ack timeout is moved to catch-up and told to Recover; it is live again once it
//    acks the head with matching checksums.
//  * A rank silent for dead_after is dropped (its journal lease then expires by itself).
//  * NCCL (when the config lists nccl; src/control/nccl_epochs.h): ranks whose Hello lists
//    nccl are members of membership epochs. The first version offered after a change starts
//    an epoch forming (NCCL rank 0 makes the group id, every member joins); once all joined it
//    is ready, and an offer the publisher broadcasts in that epoch reaches the epoch's
//    subscribers marked with it. A member leaving, dying or restarting, a failed report, or
//    a formation past nccl.timeout_ms ends the epoch (members are told to abort); a rank that
//    failed to make or join one takes its other paths until its next Hello. Versions no
//    epoch carries go by a rank's other paths, the journal last.
//  * A message from a rank the coordinator does not know (it restarted) gets a non-fatal
//    Refuse asking for a Hello; a restarted coordinator so rebuilds membership from Hellos
//    and its head from the journal.
//  * A Hello for a rank that another live process holds (another nonce, heard within
//    dead_after) gets a non-fatal Refuse naming both processes; the holder keeps the rank.
//  * Versions belong to one journal (journal_id). A subscriber whose held version is of
//    another journal is not at the head; when the journal itself is replaced (another id in
//    HEAD or an offer, or HEAD going back), every version is forgotten and every subscriber
//    reloads from an anchor.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "src/control/layouts.h"
#include "src/control/nccl_epochs.h"
#include "weightcast/control.pb.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

using CoordinatorClock = std::chrono::steady_clock;

struct CoordinatorSettings {
  std::string group_id;
  std::vector<std::string> transports;  // preference order
  std::string journal_root;
  uint32_t max_in_flight = 2;
  std::chrono::milliseconds dead_after{5000};
  std::chrono::milliseconds ack_timeout{60000};
  std::map<uint32_t, proto::Role> roles;  // every rank of the config
  size_t versions_kept = 64;              // recent versions reported by status
  uint32_t protocol_min = 1;
  uint32_t protocol_max = 1;
  // Subscribers that hold slices of an engine layout (docs/CONFIG.md `layouts`): they ack
  // their slices' checksums, which must add up over the ranks of one replica.
  struct LayoutRank {
    std::string layout, replica;
    uint32_t part = 0;
  };
  std::map<uint32_t, LayoutRank> layout_ranks;
  std::map<std::string, uint32_t> layout_parts;  // parts per layout
  std::shared_ptr<const LayoutRules> layout_rules;
  bool nccl = false;                              // the config lists nccl (nccl_listed)
  std::chrono::milliseconds nccl_timeout{60000};  // forming an epoch

  static CoordinatorSettings from_config(const proto::GroupConfig& config);
};

struct OutgoingMessage {
  std::string peer;
  proto::Envelope message;
};

// Something worth a log line (weightcastd prints these; tests assert on them).
struct CoordinatorEvent {
  enum class Kind {
    kJoined,
    kRefused,
    kOffered,
    kAcked,
    kCommitted,
    kMovedToCatchUp,
    kLive,
    kDropped,
    kLeft,
    kIgnored,
    kNccl  // an NCCL epoch formed, became ready or ended
  };
  Kind kind;
  uint32_t rank = 0;
  uint64_t version = 0;
  std::string detail;
};

class CoordinatorState {
 public:
  using TimePoint = CoordinatorClock::time_point;

  explicit CoordinatorState(CoordinatorSettings settings);

  // The journal's HEAD as read at start (or later): versions up to `head` are published.
  // `checksums` are the head manifest's, so acks of the head can be checked after a restart.
  void restore_head(uint64_t head, std::optional<uint64_t> anchor,
                    std::vector<proto::TensorChecksum> checksums, TimePoint now,
                    std::string journal_id = "");
  // The journal is not the one the group's versions came from: its identity changed (wiped
  // and recreated) or its HEAD went back (rebuilt older). Every version known is forgotten,
  // the head becomes `head`, and every subscriber is told to reload from an anchor.
  std::vector<OutgoingMessage> on_journal_replaced(uint64_t head, std::optional<uint64_t> anchor,
                                                   std::vector<proto::TensorChecksum> checksums,
                                                   std::string journal_id, const std::string& why,
                                                   TimePoint now);
  const std::string& journal_id() const { return journal_id_; }
  // A newer anchor seen in the journal.
  void note_anchor(uint64_t anchor) { anchor_ = anchor; }

  std::vector<OutgoingMessage> on_message(const std::string& peer, const proto::Envelope& message,
                                          TimePoint now);
  std::vector<OutgoingMessage> on_tick(TimePoint now);
  // An offer from a publisher, or a version found in the journal that was never offered
  // (its publisher died between HEAD and the offer).
  std::vector<OutgoingMessage> on_offer(const proto::Offer& offer, TimePoint now);

  proto::StatusReply status(TimePoint now) const;
  std::optional<uint64_t> head() const { return head_; }
  std::optional<uint64_t> committed() const { return committed_; }
  const NcclEpoch* nccl_epoch() const { return nccl_.current(); }

  // Events since the last call.
  std::vector<CoordinatorEvent> take_events();

 private:
  enum class MemberState { kLive, kCatchUp, kDead };
  struct Member {
    uint32_t rank = 0;
    proto::Role role = proto::ROLE_UNSPECIFIED;
    std::string peer;
    uint32_t protocol = 0;
    MemberState state = MemberState::kDead;
    bool left = false;  // dead by its own Leave rather than by silence
    std::optional<uint64_t> held;
    std::optional<uint64_t> acked;   // highest version acked with matching checksums
    std::vector<std::string> paths;  // Welcome.transports, in order
    TimePoint last_heard{};
    std::string host;
    uint32_t pid = 0;
    uint64_t nonce = 0;  // Hello.nonce: which process holds the rank
  };
  struct VersionRecord {
    proto::Offer offer;
    TimePoint offered_at{};
    bool committed = false;
    uint64_t publish_to_commit_us = 0;
    std::map<uint32_t, proto::SubscriberResult> results;
    // Layout ranks' acked checksums of the tensors their layout splits, by replica
    // ("layout/replica") then rank, until every part of the replica acked.
    std::map<std::string, std::map<uint32_t, std::map<std::string, uint64_t>>> slice_acks;
  };

  std::vector<OutgoingMessage> on_hello(const std::string& peer, const proto::Envelope& m,
                                        TimePoint now);
  std::vector<OutgoingMessage> on_ack(Member& member, const proto::Ack& ack, TimePoint now);
  std::vector<OutgoingMessage> on_nack(Member& member, const proto::Nack& nack, TimePoint now);
  std::vector<OutgoingMessage> move_to_catch_up(Member& member, const std::string& reason,
                                                bool from_anchor);
  std::vector<OutgoingMessage> try_commit(TimePoint now);
  // Moves the group's commit to the newest version every live subscriber acked; whether it
  // moved.
  bool advance_commit(TimePoint now);
  // Commit messages to the ranks of each engine replica whose every part acked a version past
  // the last one committed to it (at most the group's commit).
  std::vector<OutgoingMessage> replica_commits();
  proto::Envelope commit_message(uint32_t protocol, uint64_t version) const;
  void add_replica_status(proto::StatusReply* s) const;
  // Why the ack's checksums are not the offer's (empty when they are). Tensors `deferred`
  // names are not compared: their acked checksums go to *deferred_out.
  std::string check_checksums(const proto::Offer& offer, const proto::Ack& ack,
                              const std::function<bool(const std::string&)>& deferred = {},
                              std::map<std::string, uint64_t>* deferred_out = nullptr) const;
  // For a layout rank's ack: its checksums of tensors held whole equal the offer's, and once
  // every part of its replica acked, the replica's slice checksums of each split tensor add
  // up to the offer's. Empty when they do (or the replica is not complete yet).
  std::string check_replica(VersionRecord& record, uint32_t rank, const proto::Ack& ack);
  // LayoutRules::splits, remembered (its rules are regexes; acks name every tensor).
  bool layout_splits(const std::string& layout, const std::string& tensor);
  std::map<std::pair<std::string, std::string>, bool> splits_;
  // Per replica ("layout/replica"): its ranks (from the settings' layout ranks, once), and
  // the newest version committed to it.
  std::map<std::string, std::vector<uint32_t>> replicas_;
  std::map<std::string, uint64_t> replica_committed_;
  proto::Envelope envelope(uint32_t protocol) const;
  OutgoingMessage refuse(const std::string& peer, uint32_t protocol, const std::string& reason,
                         bool fatal, uint32_t rank);
  Member* member_by_peer(const std::string& peer);
  void set_result(uint64_t version, uint32_t rank, const std::string& result, uint64_t apply_us = 0,
                  uint64_t bytes_read = 0);
  void event(CoordinatorEvent::Kind kind, uint32_t rank, uint64_t version, std::string detail);
  void trim_versions();
  // Results of `rank` still "pending" become `result` ("catch_up", "dropped").
  void results_pending_to(uint32_t rank, const std::string& result);

  // The NCCL half (coordinator_nccl.cc). nccl_acked: an ack over nccl (the epoch carried).
  void nccl_hello(const Member& member, std::vector<OutgoingMessage>& out);
  void nccl_gone(uint32_t rank, const std::string& why, std::vector<OutgoingMessage>& out);
  // Marks `offer` (to subscriber `rank`) with the epoch it is received on, or clears it.
  void nccl_mark_offer(uint32_t rank, proto::Offer& offer) const;
  void nccl_acked(const proto::Ack& ack);
  void nccl_after_offer(uint64_t version, TimePoint now, std::vector<OutgoingMessage>& out);
  std::vector<OutgoingMessage> on_nccl_report(Member& member, const proto::NcclReport& report,
                                              TimePoint now);
  void nccl_tick(TimePoint now, std::vector<OutgoingMessage>& out);
  void nccl_ended(const std::optional<NcclEpoch>& ended, const std::string& why,
                  std::vector<OutgoingMessage>& out);
  OutgoingMessage nccl_stage(uint32_t rank, const NcclEpoch& e, proto::NcclStage stage,
                             const std::string& reason = "");

  CoordinatorSettings settings_;
  std::map<uint32_t, Member> members_;
  std::map<uint64_t, VersionRecord> versions_;
  std::optional<uint64_t> head_;
  std::optional<uint64_t> committed_;
  std::optional<uint64_t> anchor_;
  std::string journal_id_;  // the journal head_ belongs to (JournalHead.journal_id)
  std::vector<CoordinatorEvent> events_;
  NcclEpochs nccl_;
  TimePoint nccl_forming_since_{};
};

std::string_view event_kind_name(CoordinatorEvent::Kind kind);

// Whether `transports` lists the nccl path (coordinator_nccl.cc).
bool nccl_listed(const std::vector<std::string>& transports);

// "ucx,fs": a rank's paths, for events and logs.
std::string paths_text(const std::vector<std::string>& paths);

// The journal's name among the transports ("fs"): it carries every version, so a rank's
// paths end with it.
inline constexpr std::string_view kJournalPath = "fs";

}  // namespace weightcast
