// Rank groups as real processes (weightcastd) on loopback: join and leave, a coordinator and
// a publisher killed with SIGKILL and restarted, a subscriber that stops heartbeating, bad
// configs. Every wait is bounded; a failing test prints the ranks' logs.
#include <signal.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/group/group_harness.h"
#include "transport/fs/journal_layout.h"
#include "transport/fs/step_commit.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string logs(const std::vector<RankProcess*>& ranks) {
  std::string out;
  for (auto* r : ranks) out += "---- pid " + std::to_string(r->pid()) + "\n" + r->log();
  return out;
}

TEST(GroupProcess, JoinCommitAndLeave) {
  GroupSpec spec;
  spec.curve = true;
  spec.versions = 6;
  TestGroup g(spec);
  RankProcess coordinator(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  RankProcess sub2(g.config_path(), 2, g.dir() + "/r2.log");
  RankProcess sub3(g.config_path(), 3, g.dir() + "/r3.log");
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log", {"--stay"});
  const auto all = [&] { return logs({&coordinator, &publisher, &sub2, &sub3}); };
  ASSERT_TRUE(eventually([&] { return all_at(g, 2, 6); }, seconds(60))) << all();
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(bad_results(*s), "") << all();
  EXPECT_EQ(s->head_version(), 6u);
  ASSERT_NE(member(*s, 1), nullptr);
  EXPECT_EQ(member(*s, 1)->state(), "live");

  // SIGTERM: a clean exit and a Leave the coordinator records.
  sub3.signal(SIGTERM);
  EXPECT_EQ(sub3.wait_exit(seconds(20)), 0) << sub3.log();
  ASSERT_TRUE(eventually(
      [&] {
        auto t = group_status(g.config());
        return t && member(*t, 3) && member(*t, 3)->state() == "left";
      },
      seconds(10)))
      << all();
  publisher.signal(SIGTERM);
  sub2.signal(SIGTERM);
  coordinator.signal(SIGTERM);
  EXPECT_EQ(publisher.wait_exit(seconds(20)), 0) << publisher.log();
  EXPECT_EQ(sub2.wait_exit(seconds(20)), 0) << sub2.log();
  EXPECT_EQ(coordinator.wait_exit(seconds(20)), 0) << coordinator.log();
}

TEST(GroupProcess, CoordinatorKilledAndRestartedMidRun) {
  GroupSpec spec;
  spec.versions = 12;
  spec.step_interval_ms = 150;
  TestGroup g(spec);
  auto coordinator =
      std::make_unique<RankProcess>(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  RankProcess sub2(g.config_path(), 2, g.dir() + "/r2.log");
  RankProcess sub3(g.config_path(), 3, g.dir() + "/r3.log");
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log", {"--stay"});
  uint64_t committed = 0;
  ASSERT_TRUE(eventually(
      [&] {
        auto s = group_status(g.config());
        if (s && s->has_committed()) committed = s->committed_version();
        return committed >= 3;
      },
      seconds(60)))
      << logs({coordinator.get(), &publisher, &sub2, &sub3});
  coordinator->signal(SIGKILL);
  ASSERT_TRUE(coordinator->wait_exit(seconds(10)).has_value());
  // The ranks keep going (the journal is the data path): the publisher puts a version the
  // killed coordinator never committed into the journal; a new coordinator rebuilds its state
  // from the journal HEAD and the ranks' Hellos and must carry that version through.
  const std::string uncommitted = JournalLayout(g.journal()).manifest(committed + 1);
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(uncommitted); }, seconds(30)))
      << uncommitted << "\n"
      << publisher.log();
  coordinator =
      std::make_unique<RankProcess>(g.config_path(), 0, g.dir() + "/r0b.log", g.coordinator_args());
  ASSERT_TRUE(eventually([&] { return all_at(g, 2, 12); }, seconds(90)))
      << logs({coordinator.get(), &publisher, &sub2, &sub3});
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(bad_results(*s), "");
  // The new coordinator rebuilt its state from the journal: it started at the HEAD the old one
  // had committed (at least 3), not from nothing.
  const std::string log = coordinator->log();
  const size_t at = log.find(" at version ");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_GE(std::stoull(log.substr(at + 12)), 3u) << log;
}

// A publisher started with WEIGHTCAST_STOP_AT=`point` (transport/fault_point.h), stopped
// there, then killed with SIGKILL: the kill lands exactly at the point. The group must go on
// from HEAD with a restarted publisher, every engine verified, none ever holding the killed
// version before it was published again.
void kill_publisher_at(const std::string& point, uint64_t version) {
  GroupSpec spec;
  spec.parameters = 3000000;
  spec.versions = 10;
  spec.step_interval_ms = 100;
  TestGroup g(spec);
  RankProcess coordinator(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  RankProcess sub2(g.config_path(), 2, g.dir() + "/r2.log");
  const std::string stop_at = point + ":" + std::to_string(version);
  ::setenv("WEIGHTCAST_STOP_AT", stop_at.c_str(), 1);
  auto publisher = std::make_unique<RankProcess>(g.config_path(), 1, g.dir() + "/r1.log",
                                                 std::vector<std::string>{"--stay"});
  ::unsetenv("WEIGHTCAST_STOP_AT");
  ASSERT_TRUE(eventually([&] { return stopped(publisher->pid()); }, seconds(60)))
      << "the publisher never reached " << stop_at << "\n"
      << publisher->log();
  const JournalLayout layout(g.journal());
  const std::string staged = layout.staging() + "/" + JournalLayout::step_dir_name(version);
  std::error_code ec;
  if (point == "journal.staged") {
    EXPECT_TRUE(std::filesystem::exists(staged + "/MANIFEST", ec)) << staged;
    EXPECT_FALSE(std::filesystem::exists(layout.step(version), ec));
  } else {
    EXPECT_TRUE(std::filesystem::exists(layout.step(version) + "/MANIFEST", ec));
  }
  auto head = read_journal_head(layout);
  ASSERT_TRUE(head.ok() && *head) << "HEAD unreadable";
  EXPECT_EQ((**head).version(), version - 1) << "HEAD moved past the fault point";
  publisher->signal(SIGKILL);
  ASSERT_TRUE(publisher->wait_exit(seconds(10)).has_value());
  auto before = group_status(g.config());
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->head_version(), version - 1) << "the killed version was offered";
  const proto::MemberStatus* engine = member(*before, 2);
  ASSERT_NE(engine, nullptr);
  EXPECT_LT(engine->held_version(), version) << "the engine holds the killed version";

  publisher = std::make_unique<RankProcess>(g.config_path(), 1, g.dir() + "/r1b.log",
                                            std::vector<std::string>{"--stay"});
  ASSERT_TRUE(eventually([&] { return all_at(g, 1, 10); }, seconds(120)))
      << publisher->log() << sub2.log();
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(bad_results(*s), "") << sub2.log();
  EXPECT_NE(publisher->log().find("replaying the model's steps"), std::string::npos)
      << publisher->log();
}

TEST(GroupProcess, PublisherKilledWithAStepStagedIsRestarted) {
  kill_publisher_at("journal.staged", 3);
}

TEST(GroupProcess, PublisherKilledWithAStepRenamedBeforeHeadIsRestarted) {
  kill_publisher_at("journal.renamed", 3);
}

TEST(GroupProcess, SilentSubscriberIsDroppedAndItsLeaseExpires) {
  GroupSpec spec;
  spec.parameters = 4000000;
  spec.versions = 40;
  spec.anchor_every = 100;  // a late joiner replays many deltas: a wide lease window
  spec.step_interval_ms = 100;
  spec.dead_after_ms = 2000;
  spec.lease_ttl_ms = 1500;
  spec.subscribers = 2;
  TestGroup g(spec);
  RankProcess coordinator(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  RankProcess sub2(g.config_path(), 2, g.dir() + "/r2.log");
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log", {"--stay"});
  ASSERT_TRUE(eventually(
      [&] {
        auto s = group_status(g.config());
        return s && s->has_head() && s->head_version() >= 8;
      },
      seconds(60)));
  const std::string lease = JournalLayout(g.journal()).lease("rank-3");
  // Rank 3 joins late and stops itself (SIGSTOP) with its replay lease written, before the
  // replay: from then on it is silent while holding the lease (transport/fault_point.h).
  ::setenv("WEIGHTCAST_STOP_AT", "journal.leased:*", 1);
  auto sub3 = std::make_unique<RankProcess>(g.config_path(), 3, g.dir() + "/r3.log");
  ::unsetenv("WEIGHTCAST_STOP_AT");
  ASSERT_TRUE(eventually([&] { return stopped(sub3->pid()); }, seconds(60)))
      << "rank 3 never reached journal.leased\n"
      << sub3->log();
  ASSERT_TRUE(std::filesystem::exists(lease)) << lease;
  // Dropped after dead_after of silence; the group goes on committing without it.
  ASSERT_TRUE(eventually(
      [&] {
        auto s = group_status(g.config());
        return s && member(*s, 3) && member(*s, 3)->state() == "dead";
      },
      seconds(15)))
      << coordinator.log();
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  const uint64_t committed = s->committed_version();
  ASSERT_TRUE(eventually(
      [&] {
        auto t = group_status(g.config());
        return t && t->committed_version() > committed + 1;
      },
      seconds(30)));
  // Its lease expires (lease_ttl) and the publisher's garbage collection removes it.
  ASSERT_TRUE(eventually(
      [&] {
        std::error_code ec;
        return !std::filesystem::exists(lease, ec);
      },
      seconds(30)));
  sub3->signal(SIGKILL);
}

TEST(GroupProcess, BadConfigExitsWithTheFieldNamed) {
  GroupSpec spec;
  TestGroup g(spec);
  std::string yaml = g.yaml();
  yaml.replace(yaml.find("max_in_flight: 2"), 16, "max_in_flight: -3");
  const std::string path = g.write_config_variant("bad.yaml", yaml);
  RankProcess bad(path, 0, g.dir() + "/bad.log");
  EXPECT_EQ(bad.wait_exit(seconds(20)), 2);
  EXPECT_NE(bad.log().find("max_in_flight"), std::string::npos) << bad.log();
  RankProcess unknown(g.config_path(), 42, g.dir() + "/unknown.log");
  EXPECT_EQ(unknown.wait_exit(seconds(20)), 2);
  EXPECT_NE(unknown.log().find("42"), std::string::npos) << unknown.log();
}

TEST(GroupProcess, ListenFdIsForACoordinatorOnItsEndpointsPort) {
  GroupSpec spec;
  TestGroup g(spec);
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log", g.coordinator_args());
  EXPECT_EQ(publisher.wait_exit(seconds(20)), 2);
  EXPECT_NE(publisher.log().find("--listen-fd is for the coordinator"), std::string::npos)
      << publisher.log();
  // The group's socket listens on the config's port; this config names another one.
  std::string yaml = g.yaml();
  const size_t at = yaml.find("tcp://127.0.0.1:") + std::string("tcp://127.0.0.1:").size();
  yaml.replace(at, yaml.find('"', at) - at, "1");
  const std::string path = g.write_config_variant("other_port.yaml", yaml);
  RankProcess coordinator(path, 0, g.dir() + "/r0.log", g.coordinator_args());
  EXPECT_EQ(coordinator.wait_exit(seconds(20)), 2);
  EXPECT_NE(coordinator.log().find("listens on port"), std::string::npos) << coordinator.log();
}

}  // namespace
}  // namespace weightcast::testing
