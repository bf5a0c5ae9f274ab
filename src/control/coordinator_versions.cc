#include "src/control/coordinator_state.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

// The version half of the coordinator's state machine: offers, acks and nacks, the move to
// catch-up, and the commit rule (the membership half is in coordinator_state.cc).
namespace weightcast {
namespace {

uint64_t micros(CoordinatorClock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

}  // namespace

void CoordinatorState::results_pending_to(uint32_t rank, const std::string& result) {
  for (auto& [v, record] : versions_) {
    auto r = record.results.find(rank);
    if (r != record.results.end() && r->second.result() == "pending") r->second.set_result(result);
  }
}

std::vector<OutgoingMessage> CoordinatorState::on_offer(const proto::Offer& offer, TimePoint now) {
  const uint64_t v = offer.version();
  std::vector<OutgoingMessage> out;
  if (!offer.journal_id().empty() && !journal_id_.empty() && offer.journal_id() != journal_id_) {
    // The publisher writes into a journal other than the one the group's versions came from
    // (wiped and recreated): those versions are void; every subscriber starts over.
    const std::string why = "the journal was replaced (id " + journal_id_ + " -> " +
                            offer.journal_id() + ", offer of version " + std::to_string(v) + ")";
    event(CoordinatorEvent::Kind::kIgnored, 0, v,
          why + ": every subscriber reloads from an anchor");
    std::vector<proto::TensorChecksum> checksums(offer.checksums().begin(),
                                                 offer.checksums().end());
    out = on_journal_replaced(v, offer.anchor() ? std::optional<uint64_t>(v) : std::nullopt,
                              std::move(checksums), offer.journal_id(), why, now);
    versions_.erase(v);  // recorded below from the offer itself
  } else if (journal_id_.empty() && !offer.journal_id().empty()) {
    journal_id_ = offer.journal_id();
  }
  if (head_ && v <= *head_ && versions_.count(v) && !versions_[v].offer.checksums().empty()) {
    event(CoordinatorEvent::Kind::kIgnored, 0, v, "offer of an already known version");
    return {};
  }
  VersionRecord& record = versions_[v];
  record.offer = offer;
  record.offered_at = now;
  if (!head_ || v > *head_) head_ = v;
  if (offer.anchor()) anchor_ = v;
  event(CoordinatorEvent::Kind::kOffered, 0, v,
        std::to_string(offer.checksums_size()) + " tensors, " +
            std::to_string(offer.stored_bytes()) + " bytes");
  // First: a change of membership ends the epoch in force before this offer could use it.
  nccl_after_offer(v, now, out);
  for (auto& [rank, m] : members_) {
    if (m.role != proto::ROLE_SUBSCRIBER || m.state == MemberState::kDead) continue;
    set_result(v, rank, m.state == MemberState::kLive ? "pending" : "catch_up");
    proto::Envelope e = envelope(m.protocol);
    proto::Offer& forwarded = *e.mutable_offer();
    forwarded = offer;
    // Only the descriptors of the paths this subscriber was given (opaque to the coordinator).
    const std::vector<std::string>& paths = m.paths;  // a structured binding cannot be captured
    const auto keep_given = [&paths](auto& descriptors) {
      for (auto it = descriptors.begin(); it != descriptors.end();) {
        const bool given = std::find(paths.begin(), paths.end(), it->first) != paths.end();
        it = given ? std::next(it) : descriptors.erase(it);
      }
    };
    keep_given(*forwarded.mutable_live_descriptors());
    for (auto& shard : *forwarded.mutable_shard_descriptors()) {
      keep_given(*shard.mutable_live_descriptors());
    }
    nccl_mark_offer(rank, forwarded);
    out.push_back({m.peer, std::move(e)});
  }
  auto commits = try_commit(now);
  out.insert(out.end(), commits.begin(), commits.end());
  trim_versions();
  return out;
}

std::string CoordinatorState::check_checksums(
    const proto::Offer& offer, const proto::Ack& ack,
    const std::function<bool(const std::string&)>& deferred,
    std::map<std::string, uint64_t>* deferred_out) const {
  if (offer.checksums().empty()) return "";  // a version the coordinator has no manifest of
  if (ack.checksums_size() != offer.checksums_size()) {
    return "acked " + std::to_string(ack.checksums_size()) + " checksums, the version has " +
           std::to_string(offer.checksums_size());
  }
  // By name: a subscriber may have registered its tensors in another order.
  std::map<std::string, uint64_t> acked;
  for (const auto& c : ack.checksums()) acked[c.name()] = c.checksum();
  for (const auto& want : offer.checksums()) {
    auto it = acked.find(want.name());
    if (it == acked.end()) return "tensor '" + want.name() + "' missing from the ack";
    if (deferred && deferred(want.name())) {
      (*deferred_out)[want.name()] = it->second;
    } else if (it->second != want.checksum()) {
      return "checksum of tensor '" + want.name() + "' does not match";
    }
  }
  return "";
}

bool CoordinatorState::layout_splits(const std::string& layout, const std::string& tensor) {
  auto key = std::make_pair(layout, tensor);
  if (const auto it = splits_.find(key); it != splits_.end()) return it->second;
  const bool split = settings_.layout_rules->splits(layout, tensor);
  splits_.emplace(std::move(key), split);
  return split;
}

std::string CoordinatorState::check_replica(VersionRecord& record, uint32_t rank,
                                            const proto::Ack& ack) {
  const proto::Offer& offer = record.offer;
  if (offer.checksums().empty() || !settings_.layout_rules) return "";
  const auto& who = settings_.layout_ranks.at(rank);
  std::map<std::string, uint64_t> split;  // the acked checksums of the tensors the layout splits
  const std::string whole = check_checksums(
      offer, ack, [&](const std::string& name) { return layout_splits(who.layout, name); }, &split);
  if (!whole.empty()) return whole;
  const std::string key = who.layout + "/" + who.replica;
  auto& replica = record.slice_acks[key];
  replica[rank] = std::move(split);
  if (replica.size() < settings_.layout_parts[who.layout]) return "";
  std::string ranks;
  for (const auto& [r, sums] : replica) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  for (const auto& want : offer.checksums()) {
    if (!layout_splits(who.layout, want.name())) continue;
    uint64_t sum = 0;
    for (const auto& [r, sums] : replica) sum += sums.at(want.name());
    if (sum != want.checksum()) {
      replica.erase(rank);  // its next ack is checked again
      return "the slice checksums of tensor '" + want.name() + "' acked by replica '" +
             who.replica + "' of layout '" + who.layout + "' (ranks " + ranks +
             ") do not add up to the version's";
    }
  }
  return "";
}

std::vector<OutgoingMessage> CoordinatorState::on_ack(Member& member, const proto::Ack& ack,
                                                      TimePoint now) {
  const uint64_t v = ack.version();
  auto it = versions_.find(v);
  if (it == versions_.end() && (!head_ || v > *head_)) {
    // Never offered: it can prove nothing, and counting it would move the commit watermark
    // past versions this subscriber never verified.
    event(CoordinatorEvent::Kind::kIgnored, member.rank, v,
          "ack of version " + std::to_string(v) + ", which was never offered (head " +
              (head_ ? std::to_string(*head_) : std::string("none")) + ")");
    return {};
  }
  std::string mismatch;
  if (it != versions_.end()) {
    mismatch = settings_.layout_ranks.count(member.rank)
                   ? check_replica(it->second, member.rank, ack)
                   : check_checksums(it->second.offer, ack);
  }
  if (!mismatch.empty()) {
    set_result(v, member.rank, "mismatch");
    auto out = move_to_catch_up(member, "version " + std::to_string(v) + ": " + mismatch, true);
    auto commits = try_commit(now);  // the others may all have acked already
    out.insert(out.end(), commits.begin(), commits.end());
    return out;
  }
  member.held = v;
  if (!member.acked || v > *member.acked) member.acked = v;
  nccl_acked(ack);
  const bool after_commit = it != versions_.end() && it->second.committed;
  set_result(v, member.rank, "ok", ack.apply_us(), ack.bytes_read());
  if (auto r = versions_.find(v); r != versions_.end() && r->second.results.count(member.rank)) {
    proto::SubscriberResult& result = r->second.results[member.rank];
    result.set_after_commit(after_commit);
    result.set_transport(ack.transport());
    result.set_bytes_written(ack.bytes_written());
    result.set_peak_rss_bytes(ack.peak_rss_bytes());
    result.set_engine_bytes(ack.engine_bytes());
  }
  event(CoordinatorEvent::Kind::kAcked, member.rank, v, "");
  if (member.state == MemberState::kCatchUp && head_ && v >= *head_) {
    member.state = MemberState::kLive;
    event(CoordinatorEvent::Kind::kLive, member.rank, v, "caught up, live again");
  }
  return try_commit(now);
}

std::vector<OutgoingMessage> CoordinatorState::on_nack(Member& member, const proto::Nack& nack,
                                                       TimePoint now) {
  set_result(nack.version(), member.rank, "nack");
  // Not from an anchor: the subscriber's reader knows whether what it holds is intact (it
  // drops a version it was writing into, and falls back to anchors on its own), so replaying
  // deltas from the held version stays possible; a wrong checksum (on_ack) is another matter.
  auto out = move_to_catch_up(
      member, "nacked version " + std::to_string(nack.version()) + ": " + nack.reason(), false);
  auto commits = try_commit(now);
  out.insert(out.end(), commits.begin(), commits.end());
  return out;
}

std::vector<OutgoingMessage> CoordinatorState::move_to_catch_up(Member& member,
                                                                const std::string& reason,
                                                                bool from_anchor) {
  member.state = MemberState::kCatchUp;
  results_pending_to(member.rank, "catch_up");
  event(CoordinatorEvent::Kind::kMovedToCatchUp, member.rank, head_.value_or(0), reason);
  proto::Envelope e = envelope(member.protocol);
  proto::Recover& r = *e.mutable_recover();
  r.set_target_version(head_.value_or(0));
  r.set_reason(reason);
  r.set_from_anchor(from_anchor);
  r.set_journal_id(journal_id_);
  return {{member.peer, std::move(e)}};
}

std::vector<OutgoingMessage> CoordinatorState::try_commit(TimePoint now) {
  std::vector<OutgoingMessage> out;
  if (advance_commit(now)) {
    // The ranks of engine replicas learn of commits with their replica (replica_commits).
    for (const auto& [rank, m] : members_) {
      if (m.state == MemberState::kDead || settings_.layout_ranks.count(rank)) continue;
      out.push_back({m.peer, commit_message(m.protocol, *committed_)});
    }
  }
  auto replica = replica_commits();
  out.insert(out.end(), std::make_move_iterator(replica.begin()),
             std::make_move_iterator(replica.end()));
  return out;
}

bool CoordinatorState::advance_commit(TimePoint now) {
  // The newest version every live subscriber has acked (or passed).
  std::optional<uint64_t> reachable = head_;
  for (const auto& [rank, m] : members_) {
    if (m.role != proto::ROLE_SUBSCRIBER || m.state != MemberState::kLive) continue;
    if (!m.acked) return false;
    if (!reachable || *m.acked < *reachable) reachable = m.acked;
  }
  if (!reachable || (committed_ && *reachable <= *committed_)) return false;
  for (auto& [v, record] : versions_) {
    if (v > *reachable || record.committed) continue;
    record.committed = true;
    record.publish_to_commit_us = record.offer.publish_us() + micros(now - record.offered_at);
    // A live subscriber that acked a later version went through this one on its way (a
    // chain applied from the journal acks only its end): "passed", never an "ok" it did not
    // send for this version's checksums.
    for (auto& [rank, result] : record.results) {
      auto m = members_.find(rank);
      if (result.result() == "pending" && m != members_.end() && m->second.acked &&
          *m->second.acked > v) {
        result.set_result("passed");
      }
    }
  }
  committed_ = *reachable;
  event(CoordinatorEvent::Kind::kCommitted, 0, *reachable, "");
  return true;
}

std::vector<OutgoingMessage> CoordinatorState::replica_commits() {
  std::vector<OutgoingMessage> out;
  for (const auto& [key, ranks] : replicas_) {
    // Every part of the replica is here and acked; a part recovering holds its replica back,
    // so no rank of it serves a version another part does not hold.
    std::optional<uint64_t> reachable = committed_;
    for (const uint32_t r : ranks) {
      const auto m = members_.find(r);
      if (m == members_.end() || m->second.state == MemberState::kDead || !m->second.acked) {
        reachable.reset();
        break;
      }
      if (reachable && *m->second.acked < *reachable) reachable = m->second.acked;
    }
    if (!reachable) continue;  // (the config gives every replica each of its parts)
    const auto sent = replica_committed_.find(key);
    if (sent != replica_committed_.end() && *reachable <= sent->second) continue;
    replica_committed_[key] = *reachable;
    event(CoordinatorEvent::Kind::kCommitted, 0, *reachable, "to replica " + key);
    for (const uint32_t r : ranks) {
      const Member& m = members_.at(r);
      out.push_back({m.peer, commit_message(m.protocol, *reachable)});
    }
  }
  return out;
}

void CoordinatorState::add_replica_status(proto::StatusReply* s) const {
  for (const auto& [key, ranks] : replicas_) {
    proto::ReplicaStatus& rs = *s->add_replicas();
    rs.set_layout(key.substr(0, key.find('/')));
    rs.set_replica(key.substr(key.find('/') + 1));
    for (const uint32_t r : ranks) rs.add_ranks(r);
    const auto committed = replica_committed_.find(key);
    rs.set_has_committed(committed != replica_committed_.end());
    if (committed != replica_committed_.end()) rs.set_committed_version(committed->second);
  }
}

proto::Envelope CoordinatorState::commit_message(uint32_t protocol, uint64_t version) const {
  proto::Envelope e = envelope(protocol);
  e.mutable_commit()->set_version(version);
  const auto it = versions_.find(version);
  e.mutable_commit()->set_publish_to_commit_us(
      it == versions_.end() ? 0 : it->second.publish_to_commit_us);
  return e;
}

void CoordinatorState::set_result(uint64_t version, uint32_t rank, const std::string& result,
                                  uint64_t apply_us, uint64_t bytes_read) {
  auto it = versions_.find(version);
  if (it == versions_.end()) return;
  proto::SubscriberResult& r = it->second.results[rank];
  r.set_rank(rank);
  r.set_result(result);
  if (apply_us) r.set_apply_us(apply_us);
  if (bytes_read) r.set_bytes_read(bytes_read);
}

void CoordinatorState::trim_versions() {
  while (versions_.size() > settings_.versions_kept) {
    auto first = versions_.begin();
    // An uncommitted version is kept: its acks are still to be checked against its checksums.
    if (!first->second.committed && (!committed_ || first->first > *committed_)) break;
    versions_.erase(first);
  }
}

}  // namespace weightcast
