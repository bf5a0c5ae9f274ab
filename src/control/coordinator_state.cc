#include "src/control/coordinator_state.h"

#include <algorithm>
#include <utility>

#include "src/control/messages.h"

namespace weightcast {

std::string_view event_kind_name(CoordinatorEvent::Kind kind) {
  using K = CoordinatorEvent::Kind;
  switch (kind) {
    case K::kJoined:
      return "joined";
    case K::kRefused:
      return "refused";
    case K::kOffered:
      return "offered";
    case K::kAcked:
      return "acked";
    case K::kCommitted:
      return "committed";
    case K::kMovedToCatchUp:
      return "catch-up";
    case K::kLive:
      return "live";
    case K::kDropped:
      return "dropped";
    case K::kLeft:
      return "left";
    case K::kIgnored:
      return "ignored";
    case K::kNccl:
      return "nccl";
  }
  return "?";
}

std::string paths_text(const std::vector<std::string>& paths) {
  std::string text;
  for (const auto& p : paths) text += (text.empty() ? "" : ",") + p;
  return text;
}

CoordinatorSettings CoordinatorSettings::from_config(const proto::GroupConfig& config) {
  CoordinatorSettings s;
  s.group_id = config.group_id();
  s.transports.assign(config.transports().begin(), config.transports().end());
  if (s.transports.empty()) s.transports.push_back("fs");
  s.journal_root = config.journal_root();
  s.max_in_flight = std::max<uint32_t>(1, config.max_in_flight());
  s.dead_after = std::chrono::milliseconds(config.timeouts().dead_after_ms());
  s.ack_timeout = std::chrono::milliseconds(config.timeouts().ack_timeout_ms());
  for (const auto& r : config.ranks()) {
    s.roles[r.rank()] = r.role();
    if (!r.layout().empty()) s.layout_ranks[r.rank()] = {r.layout(), r.replica(), r.part()};
  }
  for (const auto& l : config.layouts()) s.layout_parts[l.name()] = l.parts();
  // The config was checked when parsed, so its rules compile.
  if (auto rules = LayoutRules::compile(config); rules.ok() && !s.layout_ranks.empty()) {
    s.layout_rules = std::make_shared<const LayoutRules>(std::move(*rules));
  }
  s.nccl = nccl_listed(s.transports);
  if (config.nccl().timeout_ms() > 0) {
    s.nccl_timeout = std::chrono::milliseconds(config.nccl().timeout_ms());
  }
  return s;
}

CoordinatorState::CoordinatorState(CoordinatorSettings settings) : settings_(std::move(settings)) {
  for (const auto& [rank, where] : settings_.layout_ranks) {
    replicas_[where.layout + "/" + where.replica].push_back(rank);
  }
}

void CoordinatorState::restore_head(uint64_t head, std::optional<uint64_t> anchor,
                                    std::vector<proto::TensorChecksum> checksums, TimePoint now,
                                    std::string journal_id) {
  if (head_ && *head_ >= head) return;
  if (!journal_id.empty()) journal_id_ = std::move(journal_id);
  head_ = head;
  if (anchor) anchor_ = anchor;
  VersionRecord& record = versions_[head];
  record.offer.set_version(head);
  record.offer.set_anchor(anchor && *anchor == head);  // HEAD names the head as its anchor
  for (auto& c : checksums) *record.offer.add_checksums() = std::move(c);
  record.offered_at = now;
  trim_versions();
}

std::vector<OutgoingMessage> CoordinatorState::on_journal_replaced(
    uint64_t head, std::optional<uint64_t> anchor, std::vector<proto::TensorChecksum> checksums,
    std::string journal_id, const std::string& why, TimePoint now) {
  versions_.clear();
  head_.reset();
  committed_.reset();
  anchor_.reset();
  journal_id_.clear();
  restore_head(head, anchor, std::move(checksums), now, std::move(journal_id));
  std::vector<OutgoingMessage> out;
  for (auto& [rank, m] : members_) {
    if (m.state == MemberState::kDead) continue;
    if (m.role != proto::ROLE_SUBSCRIBER) continue;
    m.held.reset();
    m.acked.reset();
    auto moved = move_to_catch_up(m, why, true);
    out.insert(out.end(), moved.begin(), moved.end());
  }
  return out;
}

proto::Envelope CoordinatorState::envelope(uint32_t protocol) const {
  proto::Envelope e;
  e.set_protocol(protocol == 0 ? settings_.protocol_max : protocol);
  e.set_from_coordinator(true);
  return e;
}

OutgoingMessage CoordinatorState::refuse(const std::string& peer, uint32_t protocol,
                                         const std::string& reason, bool fatal, uint32_t rank) {
  proto::Envelope e = envelope(protocol);
  e.mutable_refuse()->set_reason(reason);
  e.mutable_refuse()->set_fatal(fatal);
  event(CoordinatorEvent::Kind::kRefused, rank, 0, reason);
  return {peer, std::move(e)};
}

void CoordinatorState::event(CoordinatorEvent::Kind kind, uint32_t rank, uint64_t version,
                             std::string detail) {
  events_.push_back({kind, rank, version, std::move(detail)});
}

std::vector<CoordinatorEvent> CoordinatorState::take_events() {
  return std::exchange(events_, {});
}

CoordinatorState::Member* CoordinatorState::member_by_peer(const std::string& peer) {
  for (auto& [rank, m] : members_) {
    if (m.peer == peer && m.state != MemberState::kDead) return &m;
  }
  return nullptr;
}

std::vector<OutgoingMessage> CoordinatorState::on_message(const std::string& peer,
                                                          const proto::Envelope& m, TimePoint now) {
  if (m.has_hello()) return on_hello(peer, m, now);
  if (m.has_status_request()) {
    proto::Envelope e = envelope(m.protocol());
    *e.mutable_status_reply() = status(now);
    return {{peer, std::move(e)}};
  }
  Member* member = member_by_peer(peer);
  if (member == nullptr) {
    return {refuse(peer, m.protocol(),
                   "rank " + std::to_string(m.rank()) +
                       " is not known to the coordinator (it may have restarted): send Hello",
                   false, m.rank())};
  }
  member->last_heard = now;
  if (m.has_heartbeat()) {
    if (m.heartbeat().holds_version()) member->held = m.heartbeat().held_version();
    return {};
  }
  if (m.has_leave()) {
    member->state = MemberState::kDead;
    member->left = true;
    event(CoordinatorEvent::Kind::kLeft, member->rank, 0, m.leave().reason());
    std::vector<OutgoingMessage> out;
    nccl_gone(member->rank, "rank " + std::to_string(member->rank) + " left", out);
    auto commits = try_commit(now);
    out.insert(out.end(), commits.begin(), commits.end());
    return out;
  }
  if (m.has_nccl_report()) return on_nccl_report(*member, m.nccl_report(), now);
  if (m.has_offer() && member->role == proto::ROLE_PUBLISHER) return on_offer(m.offer(), now);
  if (m.has_ack() && member->role == proto::ROLE_SUBSCRIBER) return on_ack(*member, m.ack(), now);
  if (m.has_nack() && member->role == proto::ROLE_SUBSCRIBER) {
    return on_nack(*member, m.nack(), now);
  }
  event(CoordinatorEvent::Kind::kIgnored, member->rank, 0,
        "a " + std::string(role_name(member->role)) + " may not send this message");
  return {};
}

std::vector<OutgoingMessage> CoordinatorState::on_hello(const std::string& peer,
                                                        const proto::Envelope& m, TimePoint now) {
  const proto::Hello& hello = m.hello();
  const uint32_t rank = hello.rank();
  const std::string who = std::string(role_name(hello.role())) + " rank " + std::to_string(rank);
  const uint32_t low = std::max(hello.protocol_min(), settings_.protocol_min);
  const uint32_t high = std::min(hello.protocol_max(), settings_.protocol_max);
  if (low > high || hello.protocol_min() > hello.protocol_max()) {
    return {refuse(peer, settings_.protocol_max,
                   who + " speaks control protocol " + std::to_string(hello.protocol_min()) + ".." +
                       std::to_string(hello.protocol_max()) + ", this coordinator speaks " +
                       std::to_string(settings_.protocol_min) + ".." +
                       std::to_string(settings_.protocol_max) + ": no version in common",
                   true, rank)};
  }
  const uint32_t protocol = high;
  if (hello.role() == proto::ROLE_OBSERVER) {
    proto::Envelope e = envelope(protocol);
    e.mutable_welcome()->set_protocol(protocol);
    return {{peer, std::move(e)}};
  }
  auto role = settings_.roles.find(rank);
  if (role == settings_.roles.end()) {
    return {
        refuse(peer, protocol, who + " is not in group '" + settings_.group_id + "'", true, rank)};
  }
  if (role->second != hello.role()) {
    return {refuse(peer, protocol,
                   who + " is configured as a " + std::string(role_name(role->second)) +
                       " in group '" + settings_.group_id + "'",
                   true, rank)};
  }
  std::vector<std::string> paths;
  for (const auto& t : settings_.transports) {
    if (std::find(hello.transports().begin(), hello.transports().end(), t) ==
        hello.transports().end()) {
      continue;
    }
    paths.push_back(t);
    if (t == kJournalPath) break;  // it carries every version: nothing after it is needed
  }
  if (paths.empty()) {
    std::string configured;
    for (const auto& t : settings_.transports) configured += (configured.empty() ? "" : ",") + t;
    return {refuse(peer, protocol,
                   who + " can use none of the group's transports (" + configured + ")", true,
                   rank)};
  }

  if (auto held = members_.find(rank); held != members_.end()) {
    const Member& other = held->second;
    if (other.state != MemberState::kDead && other.nonce != 0 && hello.nonce() != other.nonce &&
        now - other.last_heard <= settings_.dead_after) {
      const auto ago =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - other.last_heard).count();
      return {refuse(peer, protocol,
                     who + " is held by pid " + std::to_string(other.pid) + " on host '" +
                         other.host + "' (heard " + std::to_string(ago) +
                         " ms ago); this second process, pid " + std::to_string(hello.pid()) +
                         " on host '" + hello.host() +
                         "', is refused until that one leaves or is silent for " +
                         std::to_string(settings_.dead_after.count()) + " ms: start each rank once",
                     false, rank)};
    }
  }
  Member& member = members_[rank];
  // A rank saying Hello again restarted: what it owed as a live member it now catches up on.
  results_pending_to(rank, "catch_up");
  member.left = false;
  member.rank = rank;
  member.role = hello.role();
  member.peer = peer;
  member.protocol = protocol;
  member.paths = paths;
  member.last_heard = now;
  member.host = hello.host();
  member.pid = hello.pid();
  member.nonce = hello.nonce();
  member.held.reset();
  if (hello.holds_version()) member.held = hello.held_version();
  member.acked.reset();

  proto::Envelope e = envelope(protocol);
  proto::Welcome& w = *e.mutable_welcome();
  w.set_protocol(protocol);
  w.set_has_head(head_.has_value());
  w.set_head_version(head_.value_or(0));
  w.set_has_committed(committed_.has_value());
  w.set_committed_version(committed_.value_or(0));
  w.set_has_anchor(anchor_.has_value());
  w.set_anchor_version(anchor_.value_or(0));
  for (const auto& p : paths) w.add_transports(p);
  w.set_journal_root(settings_.journal_root);
  w.set_journal_id(journal_id_);

  std::vector<OutgoingMessage> out;
  nccl_hello(member, out);
  // Where the rank runs, so a log of many hosts says which process joined.
  const std::string from =
      " from host '" + member.host + "' (pid " + std::to_string(member.pid) + ")";
  if (hello.role() == proto::ROLE_SUBSCRIBER) {
    // Holding the head means holding a verified copy of it (a subscriber only reports a
    // version whose checksums matched), so it counts as that version's ack.
    // A version of another journal is not the head, whatever its number.
    const bool same_journal = hello.held_journal_id().empty() || journal_id_.empty() ||
                              hello.held_journal_id() == journal_id_;
    const bool at_head = !head_ || (member.held && *member.held == *head_ && same_journal);
    member.state = at_head ? MemberState::kLive : MemberState::kCatchUp;
    if (at_head && head_) member.acked = *head_;
    w.set_plan(at_head ? "live" : "catch_up");
    event(CoordinatorEvent::Kind::kJoined, rank, member.held.value_or(0),
          who + " joined " + (at_head ? "live" : "to catch up") + " over " + paths_text(paths) +
              from);
    out.insert(out.begin(), {peer, std::move(e)});
    auto commits = try_commit(now);
    out.insert(out.end(), commits.begin(), commits.end());
    return out;
  }
  member.state = MemberState::kLive;
  w.set_plan("live");
  event(CoordinatorEvent::Kind::kJoined, rank, member.held.value_or(0), who + " joined" + from);
  out.insert(out.begin(), {peer, std::move(e)});
  return out;
}

std::vector<OutgoingMessage> CoordinatorState::on_tick(TimePoint now) {
  std::vector<OutgoingMessage> out;
  bool membership_changed = false;
  for (auto& [rank, m] : members_) {
    if (m.state == MemberState::kDead) continue;
    if (now - m.last_heard > settings_.dead_after) {
      m.state = MemberState::kDead;
      membership_changed = true;
      results_pending_to(rank, "dropped");
      event(CoordinatorEvent::Kind::kDropped, rank, m.held.value_or(0),
            "silent for more than " + std::to_string(settings_.dead_after.count()) + " ms");
      nccl_gone(rank, "rank " + std::to_string(rank) + " went silent", out);
      continue;
    }
    if (m.role != proto::ROLE_SUBSCRIBER || m.state != MemberState::kLive) continue;
    // The oldest version this live subscriber owes an ack for.
    for (const auto& [v, record] : versions_) {
      if (m.acked && v <= *m.acked) continue;
      if (record.committed || now - record.offered_at <= settings_.ack_timeout) break;
      set_result(v, rank, "catch_up");
      auto moved = move_to_catch_up(m,
                                    "no ack of version " + std::to_string(v) + " within " +
                                        std::to_string(settings_.ack_timeout.count()) + " ms",
                                    false);
      out.insert(out.end(), moved.begin(), moved.end());
      membership_changed = true;
      break;
    }
  }
  nccl_tick(now, out);
  if (membership_changed) {
    auto commits = try_commit(now);
    out.insert(out.end(), commits.begin(), commits.end());
  }
  return out;
}

proto::StatusReply CoordinatorState::status(TimePoint now) const {
  proto::StatusReply s;
  s.set_group_id(settings_.group_id);
  s.set_protocol(settings_.protocol_max);
  s.set_has_head(head_.has_value());
  s.set_head_version(head_.value_or(0));
  s.set_has_committed(committed_.has_value());
  s.set_committed_version(committed_.value_or(0));
  s.set_has_anchor(anchor_.has_value());
  s.set_anchor_version(anchor_.value_or(0));
  uint32_t in_flight = 0;
  for (const auto& [v, record] : versions_) in_flight += record.committed ? 0 : 1;
  s.set_versions_in_flight(in_flight);
  for (const auto& [rank, m] : members_) {
    proto::MemberStatus& ms = *s.add_members();
    ms.set_rank(rank);
    ms.set_role(m.role);
    ms.set_state(m.state == MemberState::kLive      ? "live"
                 : m.state == MemberState::kCatchUp ? "catch_up"
                 : m.left                           ? "left"
                                                    : "dead");
    ms.set_holds_version(m.held.has_value());
    ms.set_held_version(m.held.value_or(0));
    if (!m.paths.empty()) ms.set_transport(m.paths.front());
    if (head_ && m.held && *m.held <= *head_) ms.set_lag(*head_ - *m.held);
    ms.set_last_heartbeat_ms_ago(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - m.last_heard).count());
    ms.set_host(m.host);
    ms.set_pid(m.pid);
  }
  if (const NcclEpoch* e = nccl_.current()) {
    s.set_nccl_epoch(e->epoch);
    s.set_nccl_ready(e->ready);
    for (uint32_t r : e->ranks) s.add_nccl_ranks(r);
  }
  add_replica_status(&s);
  for (const auto& [v, record] : versions_) {
    proto::VersionStatus& vs = *s.add_versions();
    vs.set_version(v);
    vs.set_anchor(record.offer.anchor());
    vs.set_stored_bytes(record.offer.stored_bytes());
    vs.set_committed(record.committed);
    vs.set_publish_to_commit_us(record.publish_to_commit_us);
    vs.set_publisher_peak_rss_bytes(record.offer.peak_rss_bytes());
    vs.set_publisher_model_bytes(record.offer.model_bytes());
    for (const auto& [rank, r] : record.results) *vs.add_results() = r;
  }
  return s;
}

}  // namespace weightcast
