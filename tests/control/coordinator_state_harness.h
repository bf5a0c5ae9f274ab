// A hand-driven CoordinatorState for tests: envelope builders, a fake clock, and lookups of
// status. Group: rank 0 coordinator, 1 publisher ("pub"), 2..4 subscribers ("sub2".."sub4");
// transports {"fs"}, dead_after 1000 ms, ack_timeout 2000 ms.
#pragma once

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/control/coordinator_state.h"

namespace weightcast::coordinator_test {

using Body = proto::Envelope::BodyCase;
using Kind = CoordinatorEvent::Kind;
using Peers = std::vector<std::string>;

inline const Peers kAllPeers = {"pub", "sub2", "sub3", "sub4"};

inline CoordinatorSettings test_settings() {
  CoordinatorSettings s;
  s.group_id = "g";
  s.transports = {"fs"};
  s.journal_root = "/journal";
  s.max_in_flight = 2;
  s.dead_after = std::chrono::milliseconds(1000);
  s.ack_timeout = std::chrono::milliseconds(2000);
  s.roles = {{0, proto::ROLE_COORDINATOR}, {1, proto::ROLE_PUBLISHER}};
  for (uint32_t r = 2; r <= 4; ++r) s.roles[r] = proto::ROLE_SUBSCRIBER;
  return s;
}

// Tensors "a" and "b" with checksums distinct per version.
inline std::vector<proto::TensorChecksum> checksums_of(uint64_t v) {
  std::vector<proto::TensorChecksum> out(2);
  out[0].set_name("a");
  out[0].set_checksum(v * 100);
  out[1].set_name("b");
  out[1].set_checksum(v * 100 + 1);
  return out;
}

// An envelope from `rank` whose body is `text` (protobuf text format).
inline proto::Envelope msg(uint32_t rank, const std::string& text) {
  proto::Envelope e;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &e)) << text;
  e.set_protocol(1);
  e.set_rank(rank);
  return e;
}

inline proto::Envelope hello(uint32_t rank, proto::Role role, std::string extra = "") {
  if (extra.find("protocol") == std::string::npos) extra += " protocol_min: 1 protocol_max: 1";
  if (extra.find("transports") == std::string::npos) extra += " transports: 'fs'";
  return msg(rank, "hello { rank: " + std::to_string(rank) + " role: " + proto::Role_Name(role) +
                       " host: 'host' pid: 7 " + extra + " }");
}

// An ack of `v` with checksums_of(v), or with `b_checksum` for "b". It lists "b" first: acks
// are matched by tensor name, in any order.
inline proto::Envelope ack(uint32_t rank, uint64_t v,
                           std::optional<uint64_t> b_checksum = std::nullopt) {
  const std::string b = std::to_string(b_checksum.value_or(v * 100 + 1));
  return msg(rank, "ack { version: " + std::to_string(v) + " apply_us: 70 checksums { name: 'b' " +
                       "checksum: " + b +
                       " } checksums { name: 'a' checksum: " + std::to_string(v * 100) + " } }");
}

inline std::string peer_of(uint32_t rank) {
  return rank == 1 ? "pub" : "sub" + std::to_string(rank);
}

// The peers sent a message of kind `body`, in order.
inline Peers peers(const std::vector<OutgoingMessage>& out, Body body) {
  Peers p;
  for (const auto& m : out) {
    if (m.message.body_case() == body) p.push_back(m.peer);
  }
  return p;
}

// The one message of kind `body` in `out` (a test failure, and an empty envelope, otherwise).
inline proto::Envelope only(const std::vector<OutgoingMessage>& out, Body body) {
  if (peers(out, body).size() == 1) {
    for (const auto& m : out) {
      if (m.message.body_case() == body) return m.message;
    }
  }
  ADD_FAILURE() << "expected exactly one message of body case " << body;
  return {};
}

inline bool has_event(const std::vector<CoordinatorEvent>& events, Kind kind, uint32_t rank) {
  return std::any_of(events.begin(), events.end(),
                     [&](const CoordinatorEvent& e) { return e.kind == kind && e.rank == rank; });
}

// A Recover to `peer` alone, for `target`, from an anchor or not, its reason naming `why`.
inline void expect_recover(const std::vector<OutgoingMessage>& out, const std::string& peer,
                           uint64_t target, bool from_anchor, const std::string& why) {
  EXPECT_EQ(peers(out, Body::kRecover), Peers{peer});
  const proto::Recover r = only(out, Body::kRecover).recover();
  EXPECT_EQ(r.target_version(), target);
  EXPECT_EQ(r.from_anchor(), from_anchor);
  EXPECT_NE(r.reason().find(why), std::string::npos) << r.reason();
}

// A coordinator with a hand-driven clock; rank r sends from peer_of(r).
struct Group {
  explicit Group(CoordinatorSettings s = test_settings()) : state(std::move(s)) {}

  std::vector<OutgoingMessage> send(uint32_t rank, const proto::Envelope& e) {
    return state.on_message(peer_of(rank), e, now);
  }
  std::vector<OutgoingMessage> join(uint32_t rank, std::optional<uint64_t> held = std::nullopt) {
    const std::string holds =
        held ? "holds_version: true held_version: " + std::to_string(*held) : "";
    return send(rank,
                hello(rank, rank == 1 ? proto::ROLE_PUBLISHER : proto::ROLE_SUBSCRIBER, holds));
  }
  void join_all(std::initializer_list<uint32_t> ranks) {
    for (uint32_t r : ranks) join(r);
  }
  std::vector<OutgoingMessage> publish(uint64_t v, uint64_t publish_us = 0) {
    proto::Envelope e = msg(1, "offer { publish_us: " + std::to_string(publish_us) + " }");
    e.mutable_offer()->set_version(v);
    for (const auto& c : checksums_of(v)) *e.mutable_offer()->add_checksums() = c;
    return send(1, e);
  }
  std::vector<OutgoingMessage> tick_after(CoordinatorClock::duration d) {
    now += d;
    return state.on_tick(now);
  }
  void beat(std::initializer_list<uint32_t> ranks) {
    for (uint32_t r : ranks) EXPECT_TRUE(send(r, msg(r, "heartbeat {}")).empty());
  }
  std::string member_state(uint32_t rank) const {
    const proto::StatusReply s = state.status(now);
    for (const auto& m : s.members()) {
      if (m.rank() == rank) return m.state();
    }
    return "absent";
  }
  std::string result(uint64_t v, uint32_t rank) const {
    const std::optional<proto::SubscriberResult> r = subscriber_result(v, rank);
    return r ? r->result() : "none";
  }
  std::optional<proto::SubscriberResult> subscriber_result(uint64_t v, uint32_t rank) const {
    const proto::StatusReply s = state.status(now);
    for (const auto& vs : s.versions()) {
      for (const auto& r : vs.results()) {
        if (vs.version() == v && r.rank() == rank) return r;
      }
    }
    return std::nullopt;
  }
  // A Refuse naming `why` is the only reply, and the rank did not become a member.
  void expect_refused(uint32_t rank, const proto::Envelope& m, bool fatal, const std::string& why) {
    const auto out = send(rank, m);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].peer, peer_of(rank));
    EXPECT_EQ(out[0].message.refuse().fatal(), fatal);
    EXPECT_NE(out[0].message.refuse().reason().find(why), std::string::npos)
        << out[0].message.refuse().reason();
    EXPECT_EQ(member_state(rank), "absent");
    EXPECT_TRUE(has_event(state.take_events(), Kind::kRefused, rank));
  }
  // Publisher, sub2 and sub3 joined; version 1 offered and acked by sub3 only.
  void offer_acked_by_sub3() {
    join_all({1, 2, 3});
    publish(1);
    EXPECT_TRUE(send(3, ack(3, 1)).empty());
  }

  CoordinatorState state;
  CoordinatorClock::time_point now = CoordinatorClock::time_point{} + std::chrono::hours(1);
};

}  // namespace weightcast::coordinator_test
