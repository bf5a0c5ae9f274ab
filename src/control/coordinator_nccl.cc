#include <algorithm>
#include <utility>

#include "src/control/coordinator_state.h"
#include "src/control/messages.h"

// The NCCL half of the coordinator's state machine: which ranks form each
// membership epoch's communicator, the stages that form it, and what ends it
// (src/control/nccl_epochs.h has the bookkeeping, coordinator_state.h the rules).
namespace weightcast {
namespace {

std::string ranks_text(const NcclEpoch& e) {
  std::string s;
  for (uint32_t r : e.ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

}  // namespace

OutgoingMessage CoordinatorState::nccl_stage(uint32_t rank, const NcclEpoch& e,
                                             proto::NcclStage stage, const std::string& reason) {
  const Member& m = members_.at(rank);
  proto::Envelope env = envelope(m.protocol);
  proto::NcclEpoch& body = *env.mutable_nccl_epoch();
  body.set_stage(stage);
  body.set_epoch(e.epoch);
  if (stage == proto::NCCL_MAKE_ID || stage == proto::NCCL_JOIN) {
    for (uint32_t r : e.ranks) body.add_ranks(r);
    body.set_publishers(e.publishers);
  }
  if (stage == proto::NCCL_JOIN) body.set_group_id(e.group_id);
  if (!reason.empty()) body.set_reason(reason);
  return {m.peer, std::move(env)};
}

void CoordinatorState::nccl_ended(const std::optional<NcclEpoch>& ended, const std::string& why,
                                  std::vector<OutgoingMessage>& out) {
  if (!ended) return;
  event(CoordinatorEvent::Kind::kNccl, 0, ended->from_version,
        "epoch " + std::to_string(ended->epoch) + " ended: " + why);
  for (uint32_t rank : ended->ranks) {
    auto it = members_.find(rank);
    if (it == members_.end() || it->second.state == MemberState::kDead) continue;
    out.push_back(nccl_stage(rank, *ended, proto::NCCL_END, why));
  }
}

bool nccl_listed(const std::vector<std::string>& transports) {
  return std::find(transports.begin(), transports.end(), kNcclPath) != transports.end();
}

void CoordinatorState::nccl_hello(const Member& member, std::vector<OutgoingMessage>& out) {
  if (!settings_.nccl) return;
  // A member of epochs when its paths include nccl (its Hello listed it, and the config does
  // not put the journal first), so that its offers carry the epoch's descriptor.
  const bool can = nccl_listed(member.paths);
  const std::string who = "rank " + std::to_string(member.rank);
  if (can) {
    nccl_ended(nccl_.joined(member.rank, member.role == proto::ROLE_PUBLISHER),
               who + " said hello again (restarted)", out);
  } else {
    nccl_ended(nccl_.left(member.rank), who + " said hello again without nccl", out);
  }
}

void CoordinatorState::nccl_gone(uint32_t rank, const std::string& why,
                                 std::vector<OutgoingMessage>& out) {
  if (settings_.nccl) nccl_ended(nccl_.left(rank), why, out);
}

void CoordinatorState::nccl_mark_offer(uint32_t rank, proto::Offer& offer) const {
  auto& descriptors = *offer.mutable_live_descriptors();
  auto it = descriptors.find(std::string(kNcclPath));
  if (it == descriptors.end()) return;
  const std::optional<uint64_t> epoch = nccl_descriptor_epoch(it->second);
  if (!epoch || !nccl_.over_nccl(rank, *epoch)) descriptors.erase(it);
}

void CoordinatorState::nccl_acked(const proto::Ack& ack) {
  if (ack.transport() == kNcclPath) nccl_.carried();
}

void CoordinatorState::nccl_after_offer(uint64_t version, TimePoint now,
                                        std::vector<OutgoingMessage>& out) {
  if (!settings_.nccl) return;
  const NcclEpoch* before = nccl_.current();
  const std::optional<NcclEpoch> old = before ? std::optional<NcclEpoch>(*before) : std::nullopt;
  auto started = nccl_.begin_version(version);
  if (!started) {
    if (old && nccl_.current() == nullptr) {
      nccl_ended(old, "no publisher or no subscriber is left to form an epoch", out);
    }
    return;
  }
  if (old) nccl_ended(old, "membership changed: epoch " + std::to_string(started->epoch), out);
  nccl_forming_since_ = now;
  event(CoordinatorEvent::Kind::kNccl, started->ranks.front(), version,
        "epoch " + std::to_string(started->epoch) + " forming: ranks " + ranks_text(*started) +
            " (" + std::to_string(started->publishers) + " publishers)");
  out.push_back(nccl_stage(started->ranks.front(), *started, proto::NCCL_MAKE_ID));
}

std::vector<OutgoingMessage> CoordinatorState::on_nccl_report(Member& member,
                                                              const proto::NcclReport& report,
                                                              TimePoint now) {
  (void)now;
  std::vector<OutgoingMessage> out;
  const NcclEpoch* e = nccl_.current();
  const std::string who = "rank " + std::to_string(member.rank);
  const std::string stage(nccl_stage_name(report.stage()));
  if (e == nullptr || e->epoch != report.epoch() || !e->nccl_rank(member.rank)) {
    event(CoordinatorEvent::Kind::kIgnored, member.rank, report.version(),
          "nccl " + stage + " report of epoch " + std::to_string(report.epoch()) +
              ", which is not in force");
    return out;
  }
  if (!report.ok()) {
    const std::string why =
        who + " failed nccl " + stage +
        (report.stage() == proto::NCCL_ROUND ? " of version " + std::to_string(report.version())
                                             : std::string()) +
        ": " + report.reason();
    if (report.stage() == proto::NCCL_ROUND) {
      nccl_ended(nccl_.end(), why, out);
      if (nccl_.suspended()) {
        event(CoordinatorEvent::Kind::kNccl, 0, report.version(),
              "no new epoch: " + std::to_string(NcclEpochs::kMaxFailedEpochs) +
                  " epochs in a row failed before carrying a version; ranks use their other "
                  "transport until a rank joins or leaves");
      }
    } else {
      // It could not make or join a communicator: it falls back until its next Hello.
      nccl_ended(nccl_.left(member.rank), why + " (it goes without nccl until it says hello again)",
                 out);
    }
    return out;
  }
  if (report.stage() == proto::NCCL_MAKE_ID) {
    if (member.rank != e->ranks.front() || report.group_id().empty() ||
        !nccl_.set_group_id(e->epoch, report.group_id())) {
      event(CoordinatorEvent::Kind::kIgnored, member.rank, 0,
            "nccl make_id report without an id, or not from NCCL rank 0");
      return out;
    }
    for (uint32_t rank : e->ranks) out.push_back(nccl_stage(rank, *e, proto::NCCL_JOIN));
    return out;
  }
  if (report.stage() == proto::NCCL_JOIN && nccl_.member_joined(e->epoch, member.rank)) {
    event(CoordinatorEvent::Kind::kNccl, 0, e->from_version,
          "epoch " + std::to_string(e->epoch) + " ready: ranks " + ranks_text(*e));
    for (uint32_t rank : e->ranks) out.push_back(nccl_stage(rank, *e, proto::NCCL_READY));
  }
  return out;
}

void CoordinatorState::nccl_tick(TimePoint now, std::vector<OutgoingMessage>& out) {
  const NcclEpoch* e = nccl_.current();
  if (!settings_.nccl || e == nullptr || e->ready) return;
  if (now - nccl_forming_since_ <= settings_.nccl_timeout) return;
  // Members that never reported their join are left out of the next epoch.
  std::vector<uint32_t> late;
  for (uint32_t rank : e->ranks) {
    if (!e->joined.count(rank)) late.push_back(rank);
  }
  std::string names;
  for (uint32_t r : late) names += (names.empty() ? "" : ",") + std::to_string(r);
  nccl_ended(nccl_.end(),
             "not formed within " + std::to_string(settings_.nccl_timeout.count()) + " ms (ranks " +
                 names + " did not join; they fall back until their next hello)",
             out);
  for (uint32_t r : late) (void)nccl_.left(r);
}

}  // namespace weightcast
