// The endpoint API in one process against a coordinator thread, over real sockets on
// loopback: strided views, apply callbacks, wait_for_reads, a subscriber behind by several
// versions, a corrupted part nacked and recovered without the engine ever holding an
// unverified version, refused protocol versions and keys, hostile messages.
#include <zmq.h>

#include <gtest/gtest.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>

#include "src/control/curve_keys.h"
#include "src/control/messages.h"
#include "src/endpoint/publisher.h"
#include "src/endpoint/subscriber.h"
#include "tests/group/group_harness.h"
#include "tests/group/trainer_side.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(GroupEndpoint, StridedViewsCallbacksAndReads) {
  GroupSpec spec;
  spec.subscribers = 1;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  Weights trainer, engine;
  auto publisher = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(publisher.ok()) << publisher.status().to_string();
  for (const auto& r : trainer.refs()) ASSERT_TRUE((*publisher)->register_tensor(r).ok());

  std::mutex mu;
  std::vector<std::string> calls;
  SubscriberOptions so;
  so.rank = 2;
  so.threads = 1;
  so.before_apply = [&](uint64_t v) {
    std::lock_guard<std::mutex> l(mu);
    calls.push_back("before " + std::to_string(v));
  };
  so.after_apply = [&](uint64_t v) {
    std::lock_guard<std::mutex> l(mu);
    calls.push_back("after " + std::to_string(v));
  };
  auto subscriber = Subscriber::create(g.config(), so);
  ASSERT_TRUE(subscriber.ok());
  for (const auto& r : engine.refs()) ASSERT_TRUE((*subscriber)->register_tensor(r).ok());
  ASSERT_TRUE((*subscriber)->connect().ok());

  for (uint64_t v = 0; v < 4; ++v) {
    trainer.set(v);
    auto h = (*publisher)->publish(v);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    ASSERT_TRUE(h->wait_for_reads(in(seconds(20))).ok());
    // The trainer's next step may start now; the publication keeps the bytes it read.
    std::fill(trainer.vec.begin(), trainer.vec.end(), 0xdead);
    ASSERT_TRUE(h->wait_committed(in(seconds(30))).ok()) << "v" << v;
    ASSERT_TRUE((*subscriber)->wait_for_version(v, in(seconds(30))).ok());
    Weights expect;
    expect.set(v);
    EXPECT_EQ(engine.packed, expect.packed) << "v" << v;
    EXPECT_EQ(engine.vec, expect.vec) << "v" << v;
  }
  std::lock_guard<std::mutex> l(mu);
  ASSERT_GE(calls.size(), 8u);
  for (size_t i = 0; i + 1 < calls.size(); i += 2) {
    EXPECT_EQ(calls[i].substr(0, 6), "before");
    EXPECT_EQ(calls[i + 1], "after" + calls[i].substr(6));
  }
  EXPECT_FALSE((*publisher)->publish(2).ok());  // versions increase
}

TEST(GroupEndpoint, BehindSubscriberCatchesUpAndGoesLive) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 3;
  TestGroup g(spec);
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  Weights& trainer = t.trainer;
  Weights engine;
  auto* publisher = &t.publisher;
  ASSERT_TRUE(t.publish_committed(0, 7));  // no subscriber yet: each commits at once
  auto subscriber = Subscriber::create(g.config(), one_thread<SubscriberOptions>(2));
  ASSERT_TRUE(subscriber.ok());
  for (const auto& r : engine.refs()) ASSERT_TRUE((*subscriber)->register_tensor(r).ok());
  ASSERT_TRUE((*subscriber)->connect().ok());
  ASSERT_TRUE((*subscriber)->wait_for_version(6, in(seconds(30))).ok());
  ASSERT_TRUE(eventually(
      [&] {
        auto s = group_status(g.config());
        return s && member(*s, 2) && member(*s, 2)->state() == "live";
      },
      seconds(10)));
  trainer.set(7);
  auto h = (*publisher)->publish(7);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->wait_committed(in(seconds(30))).ok());
  EXPECT_EQ((*subscriber)->current_version(), 7u);
  Weights expect;
  expect.set(7);
  EXPECT_EQ(engine.vec, expect.vec);
}

TEST(GroupEndpoint, CorruptPartIsNackedAndRecoveredWithoutUnverifiedState) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 100;
  TestGroup g(spec);
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  Weights& trainer = t.trainer;
  Weights engine;
  auto* publisher = &t.publisher;
  ASSERT_TRUE(t.publish_committed(0, 3));
  // Version 3 is published with a corrupted part before the subscriber reads it.
  trainer.set(3);
  ASSERT_TRUE((*publisher)->publish(3)->wait_published(in(seconds(30))).ok());
  corrupt_parts(g.journal(), 3);

  // Every state the engine's tensors are seen in (after each apply) must be a version.
  std::vector<std::string> bad;
  SubscriberOptions so;
  so.rank = 2;
  so.threads = 1;
  so.after_apply = [&](uint64_t v) {
    Weights expect;
    expect.set(v);
    if (engine.vec != expect.vec || engine.packed != expect.packed) {
      bad.push_back("v" + std::to_string(v));
    }
  };
  auto subscriber = Subscriber::create(g.config(), so);
  ASSERT_TRUE(subscriber.ok());
  for (const auto& r : engine.refs()) ASSERT_TRUE((*subscriber)->register_tensor(r).ok());
  ASSERT_TRUE((*subscriber)->connect().ok());
  // It cannot reach v3 (no anchor after the corruption): it nacks and keeps nothing torn.
  ASSERT_TRUE(eventually([&] { return (*subscriber)->stats().nacks >= 1; }, seconds(20)));
  EXPECT_FALSE((*subscriber)->current_version().has_value() &&
               *(*subscriber)->current_version() >= 3);
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(member(*s, 2)->state(), "catch_up");
  // The next version is an anchor: the subscriber recovers through it and goes live.
  trainer.set(4);
  auto h = (*publisher)->publish(4, /*force_anchor=*/true);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->wait_committed(in(seconds(30))).ok());
  ASSERT_TRUE((*subscriber)->wait_for_version(4, in(seconds(30))).ok());
  EXPECT_TRUE(bad.empty()) << bad.front();
  Weights expect;
  expect.set(4);
  EXPECT_EQ(engine.vec, expect.vec);
  // Its ack of the head makes it live again.
  EXPECT_TRUE(eventually(
      [&] {
        auto t = group_status(g.config());
        return t && member(*t, 2) && member(*t, 2)->state() == "live";
      },
      seconds(10)));
}

TEST(GroupEndpoint, ProtocolMismatchIsRefusedNamingBothRanges) {
  GroupSpec spec;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  RankLinkOptions o;
  o.rank = 2;
  o.role = proto::ROLE_SUBSCRIBER;
  o.protocol_min = 5;
  o.protocol_max = 6;
  auto link = RankLink::start(g.config(), o, nullptr, nullptr);
  ASSERT_TRUE(link.ok());
  auto welcome = (*link)->wait_welcome(in(seconds(10)));
  ASSERT_FALSE(welcome.ok());
  EXPECT_NE(welcome.status().message().find("5..6"), std::string::npos)
      << welcome.status().message();
  EXPECT_NE(welcome.status().message().find("1..1"), std::string::npos);
  // Wrong role for the rank: refused too.
  o.protocol_min = o.protocol_max = 0;
  o.role = proto::ROLE_PUBLISHER;
  auto wrong = RankLink::start(g.config(), o, nullptr, nullptr);
  ASSERT_TRUE(wrong.ok());
  auto refused = (*wrong)->wait_welcome(in(seconds(10)));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("configured as a subscriber"), std::string::npos)
      << refused.status().message();
}

TEST(GroupEndpoint, WrongCurveKeyIsRefused) {
  GroupSpec spec;
  spec.curve = true;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  // The right key: welcomed.
  RankLinkOptions o;
  o.rank = 2;
  o.role = proto::ROLE_SUBSCRIBER;
  auto good = RankLink::start(g.config(), o, nullptr, nullptr);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE((*good)->wait_welcome(in(seconds(10))).ok());
  // Rank 3 presents a key pair the config does not list.
  proto::GroupConfig forged = g.config();
  const std::string key = g.dir() + "/forged.key";
  ASSERT_TRUE(write_curve_key_file(key, generate_curve_key_pair().value()).ok());
  for (auto& r : *forged.mutable_ranks()) {
    if (r.rank() == 3) r.set_key_file(key);
  }
  o.rank = 3;
  auto bad = RankLink::start(forged, o, nullptr, nullptr);
  ASSERT_TRUE(bad.ok());
  auto refused = (*bad)->wait_welcome(in(seconds(10)));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("CURVE"), std::string::npos)
      << refused.status().message();
  // Rank 3 presenting rank 2's (authorized) key: refused, one rank cannot pose as another.
  proto::GroupConfig borrowed = g.config();
  for (auto& r : *borrowed.mutable_ranks()) {
    if (r.rank() == 3) r.set_key_file(g.dir() + "/keys/rank2.key");
  }
  auto impostor = RankLink::start(borrowed, o, nullptr, nullptr);
  ASSERT_TRUE(impostor.ok());
  auto impostor_refused = (*impostor)->wait_welcome(in(seconds(10)));
  ASSERT_FALSE(impostor_refused.ok());
  EXPECT_NE(impostor_refused.status().message().find("its own CURVE key"), std::string::npos)
      << impostor_refused.status().message();
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(member(*s, 3), nullptr);
}

TEST(GroupEndpoint, HostileMessagesAreDroppedAndTheCoordinatorGoesOn) {
  GroupSpec spec;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  void* ctx = zmq_ctx_new();
  void* raw = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof(linger));
  ASSERT_EQ(zmq_connect(raw, g.config().coordinator_endpoint().c_str()), 0);
  proto::Envelope hello;
  hello.set_protocol(1);
  hello.set_rank(2);
  auto& h = *hello.mutable_hello();
  h.set_protocol_min(1);
  h.set_protocol_max(1);
  h.set_role(proto::ROLE_SUBSCRIBER);
  h.set_rank(2);
  h.add_transports("fs");
  const std::string valid = encode_envelope(hello);
  const std::string garbage = "\xff\x01 not a protobuf at all";
  const std::string truncated = valid.substr(0, valid.size() / 2);
  const std::string oversized((size_t{16} << 20) + 1, 'x');
  for (const std::string* m : {&garbage, &truncated, &oversized}) {
    zmq_send(raw, m->data(), m->size(), 0);
  }
  zmq_send(raw, "a", 1, ZMQ_SNDMORE);  // two frames
  zmq_send(raw, "b", 1, 0);
  zmq_send(raw, valid.data(), valid.size(), 0);
  // The valid Hello after them is answered with a Welcome.
  char buffer[65536];
  zmq_pollitem_t item{raw, 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq_poll(&item, 1, 10000), 1);
  const int n = zmq_recv(raw, buffer, sizeof(buffer), 0);
  ASSERT_GT(n, 0);
  auto reply = decode_envelope({reinterpret_cast<const uint8_t*>(buffer), static_cast<size_t>(n)});
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  EXPECT_TRUE(reply->has_welcome());
  zmq_close(raw);
  zmq_ctx_term(ctx);
  EXPECT_TRUE(group_status(g.config()).has_value());
}

}  // namespace
}  // namespace weightcast::testing
