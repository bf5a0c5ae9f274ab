// The broadcast transport (tests/support/broadcast_transport.h) over the in-process loopback
// group: the conformance suite with two members (publisher rank 0, subscriber rank 1) and with
// one member (publisher and reader() of the same rounds), plus what is particular to it:
// rounds held per member, roles, the idle deadline and a prompt shutdown.
#include "tests/support/broadcast_transport.h"

#include <thread>

#include "tests/support/loopback_broadcast_group.h"
#include "tests/transport/transport_conformance.h"

namespace weightcast::testing {
namespace {

using nccl::BroadcastTransport;
using nccl::BroadcastTransportOptions;
using std::chrono::milliseconds;

BroadcastTransportOptions loopback_options() {
  BroadcastTransportOptions o;
  o.name = "loopback";
  o.idle_deadline = milliseconds(30'000);  // destruction aborts the group long before
  return o;
}

std::vector<std::unique_ptr<BroadcastTransport>> transports_of(
    int ranks, const BroadcastTransportOptions& o = loopback_options()) {
  auto members = nccl::make_loopback_group(ranks);
  EXPECT_TRUE(members.ok()) << members.status().to_string();
  std::vector<std::unique_ptr<BroadcastTransport>> out;
  for (auto& m : *members) {
    auto t = BroadcastTransport::create(std::move(m), o);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    out.push_back(std::move(t).value());
  }
  return out;
}

TransportPeers connect_pair() {
  auto t = transports_of(2);
  BroadcastTransport* publisher = t[0].get();
  BroadcastTransport* subscriber = t[1].get();
  TransportPeers peers;
  peers.publisher = std::move(t[0]);
  peers.subscriber = std::move(t[1]);
  peers.corrupt = [subscriber](uint64_t version, const std::string& part) {
    Status s = subscriber->corrupt_held_part(version, part);
    EXPECT_TRUE(s.ok()) << s.to_string();
  };
  peers.break_publisher = [publisher] { publisher->abort("test: the publisher's link broke"); };
  return peers;
}

TransportPeers connect_alone() {
  auto t = transports_of(1);
  BroadcastTransport* member = t[0].get();
  TransportPeers peers;
  peers.subscriber = member->reader();
  peers.publisher = std::move(t[0]);
  peers.corrupt = [member](uint64_t version, const std::string& part) {
    Status s = member->corrupt_held_part(version, part);
    EXPECT_TRUE(s.ok()) << s.to_string();
  };
  peers.break_publisher = [member] { member->abort("test: the group broke"); };
  return peers;
}

INSTANTIATE_TEST_SUITE_P(BroadcastLoopback, TransportConformance,
                         ::testing::Values(TransportBackend{"two_members", connect_pair},
                                           TransportBackend{"one_member", connect_alone}),
                         [](const auto& info) { return info.param.name; });

Status publish_bytes(PartPublisher& t, uint64_t version, const std::vector<uint8_t>& bytes) {
  const PartPayload part{"weights", bytes};
  return t.publish(version, std::span(&part, 1), deadline_in(milliseconds(5000)));
}

TEST(BroadcastTransport, EverySubscriberHoldsTheLastKeepVersions) {
  auto o = loopback_options();
  o.keep_versions = 2;
  auto t = transports_of(3, o);
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(publish_bytes(*t[0], v, std::vector<uint8_t>(100, uint8_t(v))).ok());
  }
  for (int r : {1, 2}) {
    auto latest = t[r]->latest(deadline_in(milliseconds(5000)));
    ASSERT_TRUE(latest.ok()) << latest.status().to_string();
    EXPECT_EQ(latest->version, 3u);
    EXPECT_TRUE(t[r]->describe(2, deadline_in(milliseconds(5000))).ok());
    auto gone = t[r]->describe(1, deadline_in(milliseconds(5000)));
    EXPECT_EQ(gone.status().code(), StatusCode::kNotFound) << gone.status().to_string();
    std::vector<uint8_t> dest(100);
    ASSERT_TRUE(t[r]->fetch(3, latest->parts[0], dest, deadline_in(milliseconds(5000))).ok());
    EXPECT_EQ(dest, std::vector<uint8_t>(100, 3));
  }
  // The root of a group of several holds nothing; only it publishes.
  EXPECT_EQ(t[0]->latest(deadline_in(milliseconds(1000))).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(publish_bytes(*t[1], 4, {1}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t[0]->info().name, "loopback");
}

TEST(BroadcastTransport, DuplicatePartNamesAreRefusedWithoutBreakingTheGroup) {
  auto t = transports_of(2);
  const std::vector<uint8_t> bytes(4, 1);
  const PartPayload parts[2] = {{"a", bytes}, {"a", bytes}};
  Status s = t[0]->publish(1, parts, deadline_in(milliseconds(5000)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'a'"), std::string::npos);
  EXPECT_TRUE(publish_bytes(*t[0], 1, bytes).ok());
}

TEST(BroadcastTransport, IdleDeadlineEndsTheReceiveLoopAndTheGroup) {
  auto o = loopback_options();
  o.idle_deadline = milliseconds(200);
  auto t = transports_of(2, o);
  const auto start = std::chrono::steady_clock::now();
  while (t[1]->receive_status().ok() &&
         std::chrono::steady_clock::now() - start < milliseconds(5000)) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  Status ended = t[1]->receive_status();
  EXPECT_EQ(ended.code(), StatusCode::kDeadlineExceeded) << ended.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  Status late = publish_bytes(*t[0], 1, {1, 2});
  EXPECT_FALSE(late.ok());
  const Status again = publish_bytes(*t[0], 2, {1, 2});
  EXPECT_EQ(again.code(), StatusCode::kUnavailable) << again.to_string();
}

TEST(BroadcastTransport, DestructionStopsTheReceiveThreadPromptly) {
  auto o = loopback_options();
  o.idle_deadline = milliseconds(600'000);
  auto t = transports_of(3, o);
  const auto start = std::chrono::steady_clock::now();
  t[2].reset();
  t[1].reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_FALSE(publish_bytes(*t[0], 1, {1}).ok());  // the group went with them
}

TEST(BroadcastTransport, BadOptionsAreRefused) {
  auto members = nccl::make_loopback_group(2);
  ASSERT_TRUE(members.ok());
  auto o = loopback_options();
  o.root = 2;
  EXPECT_EQ(BroadcastTransport::create(std::move((*members)[0]), o).status().code(),
            StatusCode::kInvalidArgument);
  o.root = 0;
  o.keep_versions = 0;
  EXPECT_EQ(BroadcastTransport::create(std::move((*members)[1]), o).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weightcast::testing
