// The ucx live path of a rank group (src/endpoint/ucx_live.h), in one process against a
// coordinator thread on loopback, with UCX's shared-memory and TCP transports forced in turn
// and the publisher serving in place and from shared-memory copies:
// live subscribers read every delta from the publisher's memory over UCX and ack it as such;
// a UCX failure is nacked and recovered through the journal, never leaving an engine on an
// unverified version.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "src/endpoint/ucx_live.h"
#include "tests/group/group_harness.h"
#include "tests/group/trainer_side.h"

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

// (UCX_TLS, ucx.publisher_memory)
class GroupUcx : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  void SetUp() override {
    if (!ucx_built()) GTEST_SKIP() << "this build has no UCX (libucx-dev not found)";
  }
  GroupSpec spec(uint32_t subscribers) const {
    GroupSpec s;
    s.subscribers = subscribers;
    s.transports = "[ucx, fs]";
    s.ucx_tls = std::get<0>(GetParam());
    s.ucx_publisher_memory = std::get<1>(GetParam());
    s.anchor_every = 4;
    return s;
  }
};

// A subscriber (rank) over UCX whose engine is `engine`, connected.
std::unique_ptr<Subscriber> connect_engine(const TestGroup& g, uint32_t rank, Weights& engine,
                                           std::vector<std::string>& bad) {
  return connect_engine(g, one_thread<SubscriberOptions>(rank), engine, bad);
}

TEST_P(GroupUcx, LiveSubscribersReadDeltasOverUcx) {
  TestGroup g(spec(2));
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  ASSERT_TRUE(t.publisher->serves("ucx"))
      << "UCX did not start with UCX_TLS=" << std::get<0>(GetParam());
  Weights engines[2];
  std::vector<std::string> bad[2];
  std::unique_ptr<Subscriber> subs[2];
  for (int i = 0; i < 2; ++i) {
    subs[i] = connect_engine(g, g.subscriber_rank(i), engines[i], bad[i]);
    ASSERT_NE(subs[i], nullptr);
  }
  // v0 is the first anchor (no delta: the journal); v1..v3 deltas; v4 an anchor carrying its
  // delta; v5, v6 deltas. Each is committed before the next.
  ASSERT_TRUE(t.publish_committed(0, 7));
  auto status = group_status(g.config());
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(bad_results(*status), "");
  for (int i = 0; i < 2; ++i) {
    const uint32_t rank = g.subscriber_rank(i);
    ASSERT_TRUE(subs[i]->wait_for_version(6, in(seconds(30))).ok());
    Weights expect;
    expect.set(6);
    EXPECT_EQ(engines[i].vec, expect.vec) << "rank " << rank;
    EXPECT_EQ(engines[i].packed, expect.packed) << "rank " << rank;
    EXPECT_TRUE(bad[i].empty()) << "rank " << rank << " held a torn " << bad[i].front();
    ASSERT_NE(member(*status, rank), nullptr);
    EXPECT_EQ(member(*status, rank)->transport(), "ucx") << "rank " << rank;
    EXPECT_EQ(acked_transport(*status, 0, rank), "fs") << "the first anchor has no delta";
    for (uint64_t v = 1; v <= 6; ++v) {
      EXPECT_EQ(acked_transport(*status, v, rank), "ucx") << "rank " << rank << " v" << v;
    }
    const SubscriberStats stats = subs[i]->stats();
    EXPECT_EQ(stats.versions_by_path.at("ucx"), 6u) << "rank " << rank;
    EXPECT_EQ(stats.last_transport, "ucx");
    EXPECT_EQ(stats.nacks, 0u);
  }
}

TEST_P(GroupUcx, UcxFailureIsNackedAndRecoveredThroughTheJournal) {
  GroupSpec s = spec(1);
  s.ack_timeout_ms = 4000;  // also bounds a UCX fetch from a vanished worker
  TestGroup g(s);
  // Version 3's Offer names a worker that is gone by the time the subscriber reads it.
  Publisher* publisher = nullptr;
  PublisherOptions po = one_thread<PublisherOptions>(1);
  po.before_offer = [&publisher](uint64_t v) {
    if (v == 3 && publisher != nullptr) publisher->close_live_path_for_test("ucx");
  };
  TrainerSide t(g, po);
  ASSERT_TRUE(t.ok()) << t.why();
  publisher = t.publisher.get();
  ASSERT_TRUE(publisher->serves("ucx"));
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, g.subscriber_rank(0), engine, bad);
  ASSERT_NE(sub, nullptr);
  ASSERT_TRUE(t.publish_committed(0, 3));
  EXPECT_EQ(sub->stats().last_transport, "ucx");
  // v3 over UCX fails, is nacked, and the Recover that follows reads the journal; v4 and v5
  // are no longer served over UCX and arrive through the journal too.
  ASSERT_TRUE(t.publish_committed(3, 6));
  ASSERT_TRUE(sub->wait_for_version(5, in(seconds(30))).ok());
  Weights expect;
  expect.set(5);
  EXPECT_EQ(engine.vec, expect.vec);
  EXPECT_EQ(engine.packed, expect.packed);
  EXPECT_TRUE(bad.empty()) << "held a torn " << bad.front();
  const SubscriberStats stats = sub->stats();
  EXPECT_GE(stats.nacks, 1u) << "the failed UCX read must be nacked";
  EXPECT_EQ(stats.versions_by_path.at("ucx"), 2u);  // v1, v2
  EXPECT_EQ(stats.last_transport, "fs");
  // A subscriber catching up does not hold commits back: its acks may land after them.
  EXPECT_TRUE(eventually(
      [&] {
        auto st = group_status(g.config());
        return st && member(*st, 2) && member(*st, 2)->state() == "live" &&
               acked_transport(*st, 5, g.subscriber_rank(0)) == "fs";
      },
      seconds(10)))
      << "rank 2 not live with v5 acked from the journal";
}

INSTANTIATE_TEST_SUITE_P(Tls, GroupUcx,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::Values("in_place", "copy")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

}  // namespace
}  // namespace weightcast::testing
