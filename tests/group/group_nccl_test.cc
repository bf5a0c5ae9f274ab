// The nccl live path of a rank group (src/endpoint/nccl_live_path.h) in one process against a
// coordinator thread on loopback, with the in-process loopback group standing in for NCCL
// (tests/support/loopback_broadcast_group.h; the NCCL group itself runs on a lent GPU:
// tests/transport_nccl). What this proves on a CPU: the epoch protocol end to end (make_id,
// join, ready, end), offers marked with the epoch, rounds carrying verified deltas that the
// subscribers apply and ack as "nccl", a late engine falling back until the next epoch
// includes it, and a failed round nacked and recovered through the journal while the next
// epoch carries later versions again.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "src/endpoint/nccl_live.h"
#include "src/endpoint/nccl_live_path.h"
#include "tests/group/group_harness.h"
#include "tests/group/trainer_side.h"
#include "tests/support/loopback_broadcast_group.h"

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

// A member whose `fail_at`-th broadcast call (counted over the factory's groups) fails as a
// broken link would: the group is aborted, so every member's round fails.
class FailingGroup final : public nccl::BroadcastGroup {
 public:
  FailingGroup(std::unique_ptr<nccl::BroadcastGroup> inner, std::atomic<int>* calls, int fail_at)
      : inner_(std::move(inner)), calls_(calls), fail_at_(fail_at) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status broadcast(std::span<const nccl::SchedulePart> parts,
                   std::span<const std::span<const uint8_t>> sources,
                   std::span<const std::span<uint8_t>> destinations, Deadline deadline) override {
    if (++*calls_ == fail_at_) {
      inner_->abort("injected link failure");
      return io_error("injected link failure");
    }
    return inner_->broadcast(parts, sources, destinations, deadline);
  }
  void abort(const std::string& why) override { inner_->abort(why); }

 private:
  std::unique_ptr<nccl::BroadcastGroup> inner_;
  std::atomic<int>* calls_;
  int fail_at_;
};

class FailingGroups final : public nccl::BroadcastGroupFactory {
 public:
  explicit FailingGroups(int fail_at) : fail_at_(fail_at) {}
  std::string name() const override { return "loopback (failing)"; }
  Result<std::string> make_id() override { return loopback_.make_id(); }
  Result<std::unique_ptr<nccl::BroadcastGroup>> join(const std::string& id, int ranks, int rank,
                                                     Deadline deadline) override {
    ASSIGN_OR_RETURN(auto inner, loopback_.join(id, ranks, rank, deadline));
    return std::unique_ptr<nccl::BroadcastGroup>(
        std::make_unique<FailingGroup>(std::move(inner), &calls_, fail_at_));
  }

 private:
  nccl::LoopbackBroadcastGroupFactory loopback_;
  std::atomic<int> calls_{0};
  int fail_at_;
};

NcclGroupsMaker loopback_groups() {
  return [](const proto::NcclConfig&) {
    return Result<std::unique_ptr<nccl::BroadcastGroupFactory>>(
        std::make_unique<nccl::LoopbackBroadcastGroupFactory>());
  };
}

// The default paths with nccl on `groups` (empty: the default nccl path, on real NCCL).
std::shared_ptr<const LivePathRegistry> paths_on(NcclGroupsMaker groups) {
  if (!groups) return nullptr;
  auto paths = std::make_shared<LivePathRegistry>(*default_live_paths());
  paths->add(100, nccl_live_path(std::move(groups), {MemoryKind::kHost}));
  return paths;
}

GroupSpec nccl_spec(uint32_t subscribers) {
  GroupSpec s;
  s.subscribers = subscribers;
  s.transports = "[nccl, fs]";
  s.nccl_timeout_ms = 3000;
  s.ack_timeout_ms = 8000;
  s.anchor_every = 4;
  return s;
}

// A subscriber (rank) whose engine is `engine`, connected, on `groups` (empty: real NCCL).
std::unique_ptr<Subscriber> connect_engine(const TestGroup& g, uint32_t rank, Weights& engine,
                                           std::vector<std::string>& bad,
                                           NcclGroupsMaker groups = loopback_groups()) {
  SubscriberOptions so = one_thread<SubscriberOptions>(rank);
  so.live_paths = paths_on(std::move(groups));
  return connect_engine(g, std::move(so), engine, bad);
}

PublisherOptions nccl_publisher() {
  PublisherOptions po = one_thread<PublisherOptions>(1);
  po.live_paths = paths_on(loopback_groups());
  return po;
}

void expect_engine_at(const Weights& engine, uint64_t v, const std::string& who) {
  Weights expect;
  expect.set(v);
  EXPECT_EQ(engine.vec, expect.vec) << who;
  EXPECT_EQ(engine.packed, expect.packed) << who;
}

TEST(GroupNccl, SubscribersOfAReadyEpochReceiveDeltasByBroadcastAndALateOneJoinsTheNext) {
  TestGroup g(nccl_spec(3));
  TrainerSide t(g, nccl_publisher());
  ASSERT_TRUE(t.ok()) << t.why();
  ASSERT_TRUE(t.publisher->serves("nccl"));
  Weights engines[3];
  std::vector<std::string> bad[3];
  std::unique_ptr<Subscriber> subs[3];
  for (int i = 0; i < 2; ++i) {
    subs[i] = connect_engine(g, g.subscriber_rank(i), engines[i], bad[i]);
    ASSERT_NE(subs[i], nullptr);
  }
  ASSERT_TRUE(t.publish_committed(0, 6));
  // A late engine: it catches up through the journal and rides on the epoch formed next.
  subs[2] = connect_engine(g, g.subscriber_rank(2), engines[2], bad[2]);
  ASSERT_NE(subs[2], nullptr);
  ASSERT_TRUE(subs[2]->wait_for_version(5, in(seconds(30))).ok());
  ASSERT_TRUE(t.publish_committed(6, 12));
  auto status = group_status(g.config());
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(bad_results(*status), "");
  EXPECT_TRUE(status->nccl_ready());
  EXPECT_EQ(std::vector<uint32_t>(status->nccl_ranks().begin(), status->nccl_ranks().end()),
            (std::vector<uint32_t>{1, 2, 3, 4}))
      << "the late engine is in the epoch in force";
  EXPECT_GE(status->nccl_epoch(), 2u);
  for (int i = 0; i < 3; ++i) {
    const uint32_t rank = g.subscriber_rank(i);
    const std::string who = "rank " + std::to_string(rank);
    ASSERT_TRUE(subs[i]->wait_for_version(11, in(seconds(30))).ok()) << who;
    expect_engine_at(engines[i], 11, who);
    EXPECT_TRUE(bad[i].empty()) << who << " held a torn " << bad[i].front();
    EXPECT_EQ(acked_transport(*status, 0, rank), i < 2 ? "fs" : "") << "v0 starts the epoch";
    for (uint64_t v = 9; v <= 11; ++v) {
      EXPECT_EQ(acked_transport(*status, v, rank), "nccl") << who << " v" << v;
    }
    const SubscriberStats stats = subs[i]->stats();
    EXPECT_GE(stats.versions_by_path.at("nccl"), i < 2 ? 8u : 3u) << who;
    EXPECT_EQ(stats.last_transport, "nccl") << who;
    EXPECT_EQ(stats.nacks, 0u) << who;
  }
}

TEST(GroupNccl, AFailedRoundIsNackedRecoveredThroughTheJournalAndTheNextEpochCarriesOn) {
  TestGroup g(nccl_spec(1));
  TrainerSide t(g, nccl_publisher());
  ASSERT_TRUE(t.ok()) << t.why();
  Weights engine;
  std::vector<std::string> bad;
  // Rounds are 3 calls (header, descriptor, parts): call 11 is inside the 4th round.
  auto sub = connect_engine(g, g.subscriber_rank(0), engine, bad, [](const proto::NcclConfig&) {
    return Result<std::unique_ptr<nccl::BroadcastGroupFactory>>(
        std::make_unique<FailingGroups>(11));
  });
  ASSERT_NE(sub, nullptr);
  // While the subscriber recovers it is not live, so versions commit without it: publish on
  // only once it is live again, so the later versions wait for its acks.
  ASSERT_TRUE(t.publish_committed(0, 6));
  ASSERT_TRUE(sub->wait_for_version(5, in(seconds(30))).ok());
  ASSERT_TRUE(eventually(
      [&] {
        auto st = group_status(g.config());
        return st && member(*st, 2) && member(*st, 2)->state() == "live";
      },
      seconds(10)))
      << "rank 2 not live again";
  ASSERT_TRUE(t.publish_committed(6, 12));
  ASSERT_TRUE(sub->wait_for_version(11, in(seconds(30))).ok());
  expect_engine_at(engine, 11, "rank 2");
  EXPECT_TRUE(bad.empty()) << "held a torn " << bad.front();
  const SubscriberStats stats = sub->stats();
  EXPECT_GE(stats.nacks, 1u) << "the failed round must be nacked";
  EXPECT_EQ(stats.last_transport, "nccl") << "a later epoch carries the last versions";
  auto status = group_status(g.config());
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(acked_transport(*status, 11, g.subscriber_rank(0)), "nccl");
  EXPECT_GE(status->nccl_epoch(), 2u) << "the failed epoch was replaced";
}

// Whether NCCL here forms a two-rank group on one GPU (NCCL_MULTI_RANK_GPU_ENABLE); else why not.
std::string two_ranks_on_one_gpu(const proto::NcclConfig& config) {
  auto groups = make_nccl_groups(config);
  if (!groups.ok()) return groups.status().message();
  auto id = (*groups)->make_id();
  if (!id.ok()) return id.status().message();
  Result<std::unique_ptr<nccl::BroadcastGroup>> joined[2] = {internal_error("not run"),
                                                             internal_error("not run")};
  std::thread second([&] { joined[1] = (*groups)->join(*id, 2, 1, deadline_in(seconds(20))); });
  joined[0] = (*groups)->join(*id, 2, 0, deadline_in(seconds(20)));
  second.join();
  // Both ranks' reasons: NCCL names the refusal ("Duplicate GPU detected") on one rank, and
  // tests/gpu/run.sh accepts the skip only when NCCL's own words are in the message.
  std::string why;
  for (int r = 0; r < 2; ++r) {
    if (!joined[r].ok()) {
      why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " +
             joined[r].status().message();
    }
  }
  return why.empty() ? "" : "NCCL refused two ranks on one GPU: " + why;
}

// The same path over real NCCL, publisher and subscriber on one GPU: only where NCCL accepts
// two ranks on one device (tests/gpu/run.sh runs it on a lent H200).
TEST(NcclGroupOnOneGpu, APublisherAndASubscriberCarryVersionsOverNcclWhereTwoRanksFit) {
  ::setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  TestGroup g(nccl_spec(1));
  const std::string why = two_ranks_on_one_gpu(g.config().nccl());
  if (!why.empty()) GTEST_SKIP() << why;
  PublisherOptions po = one_thread<PublisherOptions>(1);
  TrainerSide t(g, po);
  ASSERT_TRUE(t.ok()) << t.why();
  ASSERT_TRUE(t.publisher->serves("nccl"));
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, g.subscriber_rank(0), engine, bad, {});
  ASSERT_NE(sub, nullptr);
  ASSERT_TRUE(t.publish_committed(0, 8));
  ASSERT_TRUE(sub->wait_for_version(7, in(seconds(30))).ok());
  expect_engine_at(engine, 7, "rank 2");
  EXPECT_TRUE(bad.empty()) << "held a torn " << bad.front();
  auto status = group_status(g.config());
  ASSERT_TRUE(status.has_value());
  for (uint64_t v = 5; v <= 7; ++v) {
    EXPECT_EQ(acked_transport(*status, v, g.subscriber_rank(0)), "nccl") << "v" << v;
  }
  EXPECT_EQ(sub->stats().nacks, 0u);
}

}  // namespace
}  // namespace weightcast::testing
