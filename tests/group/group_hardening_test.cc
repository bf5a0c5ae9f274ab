// Rank groups used carelessly: the journal wiped and recreated under a running group, a rank
// started twice, a publisher waiting for credit when SIGTERM comes, ranks that would wait
// silently (a journal or coordinator that is not there), a coordinator pointed at a file.
// Real weightcastd processes on loopback; every wait is bounded.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/group/group_harness.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool live_at(const TestGroup& group, uint32_t rank, uint64_t version) {
  auto s = group_status(group.config());
  if (!s || !s->has_committed() || s->committed_version() < version) return false;
  const auto* m = member(*s, rank);
  return m && m->state() == "live" && m->holds_version() && m->held_version() == version;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

size_t lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::string with(std::string yaml, const std::string& from, const std::string& to) {
  const size_t at = yaml.find(from);
  if (at != std::string::npos) yaml.replace(at, from.size(), to);
  return yaml;
}

TEST(GroupHardening, JournalRecreatedUnderTheGroupIsReloadedFromItsAnchor) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.versions = 6;
  TestGroup g(spec);
  RankProcess coordinator(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  RankProcess sub(g.config_path(), 2, g.dir() + "/r2.log");
  auto publisher = std::make_unique<RankProcess>(g.config_path(), 1, g.dir() + "/r1.log",
                                                 std::vector<std::string>{"--stay"});
  const auto all = [&] {
    return "---- coordinator\n" + coordinator.log() + "---- subscriber\n" + sub.log() +
           "---- publisher\n" + publisher->log();
  };
  ASSERT_TRUE(eventually([&] { return live_at(g, 2, 6); }, seconds(60))) << all();
  publisher->signal(SIGTERM);
  ASSERT_EQ(publisher->wait_exit(seconds(20)), 0) << all();

  // Another model (another seed) into a journal made anew at the same root: its v3 is not
  // the old v3, and the subscriber's v6 is nobody's version any more.
  std::filesystem::remove_all(g.journal());
  const std::string other = g.write_config_variant(
      "other.yaml", with(with(g.yaml(), "seed: 3", "seed: 11"), "versions: 6", "versions: 3"));
  const size_t sub_lines_before = lines(sub.log());
  const size_t coordinator_lines_before = lines(coordinator.log());
  publisher = std::make_unique<RankProcess>(other, 1, g.dir() + "/r1b.log",
                                            std::vector<std::string>{"--stay"});
  ASSERT_TRUE(eventually([&] { return live_at(g, 2, 3); }, seconds(60))) << all();
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(bad_results(*s).find("nack"), std::string::npos) << all();
  EXPECT_NE(sub.log().find("from an anchor"), std::string::npos) << all();
  // Bounded: no loop of mismatches (the defect wrote 70-90 lines a second).
  std::this_thread::sleep_for(seconds(2));
  EXPECT_LT(lines(sub.log()) - sub_lines_before, 60u) << all();
  EXPECT_LT(lines(coordinator.log()) - coordinator_lines_before, 60u) << all();
  EXPECT_TRUE(live_at(g, 2, 3)) << all();
}

TEST(GroupHardening, ASecondProcessForALiveRankIsRefusedNamingBoth) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.versions = 2;
  TestGroup g(spec);
  RankProcess coordinator(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log", {"--stay"});
  RankProcess first(g.config_path(), 2, g.dir() + "/r2.log");
  ASSERT_TRUE(eventually([&] { return live_at(g, 2, 2); }, seconds(60))) << coordinator.log();
  RankProcess second(g.config_path(), 2, g.dir() + "/r2b.log");
  const std::string held_by = "is held by pid " + std::to_string(first.pid());
  ASSERT_TRUE(
      eventually([&] { return second.log().find(held_by) != std::string::npos; }, seconds(20)))
      << second.log() << "---- coordinator\n"
      << coordinator.log();
  EXPECT_NE(second.log().find("pid " + std::to_string(second.pid())), std::string::npos)
      << second.log();
  std::this_thread::sleep_for(seconds(3));
  // The first keeps the rank: it is the one the coordinator lists, live, never re-joined.
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  ASSERT_NE(member(*s, 2), nullptr);
  EXPECT_EQ(member(*s, 2)->pid(), static_cast<uint32_t>(first.pid()));
  EXPECT_EQ(member(*s, 2)->state(), "live");
  EXPECT_EQ(count(coordinator.log(), "coordinator: joined"), 2u) << coordinator.log();
  // The refusals repeat while both run; the logs stay bounded.
  EXPECT_LT(count(coordinator.log(), "is held by pid"), 10u) << coordinator.log();
  EXPECT_LT(count(second.log(), "is held by pid"), 10u) << second.log();
  // Once the first is gone the second takes the rank.
  first.signal(SIGKILL);
  ASSERT_TRUE(first.wait_exit(seconds(10)).has_value());
  ASSERT_TRUE(eventually(
      [&] {
        auto t = group_status(g.config());
        return t && member(*t, 2) && member(*t, 2)->pid() == static_cast<uint32_t>(second.pid()) &&
               member(*t, 2)->state() == "live";
      },
      seconds(30)))
      << coordinator.log();
}

TEST(GroupHardening, SigtermEndsAPublisherWaitingForCreditWithinASecond) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.versions = 8;
  spec.max_in_flight = 1;
  spec.ack_timeout_ms = 60000;  // credit waits up to 120 s
  TestGroup g(spec);
  // No coordinator: versions are published to the journal but never committed.
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log");
  ASSERT_TRUE(eventually(
      [&] { return publisher.log().find("waits for 1 published versions") != std::string::npos; },
      seconds(30)))
      << publisher.log();
  EXPECT_NE(publisher.log().find(g.config().coordinator_endpoint()), std::string::npos)
      << publisher.log();
  const auto signalled = std::chrono::steady_clock::now();
  publisher.signal(SIGTERM);
  EXPECT_EQ(publisher.wait_exit(seconds(5)), 0) << publisher.log();
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, milliseconds(1500)) << publisher.log();
}

TEST(GroupHardening, RanksSayWhatTheyWaitFor) {
  GroupSpec spec;
  spec.subscribers = 1;
  TestGroup g(spec);
  // A subscriber whose journal is not there (a wrong journal.root).
  const std::string wrong_root = g.write_config_variant(
      "wrong_root.yaml", with(g.yaml(), "journal: {root: journal", "journal: {root: nowhere"));
  RankProcess sub(wrong_root, 2, g.dir() + "/r2.log");
  ASSERT_TRUE(eventually(
      [&] { return sub.log().find("waiting for a version in journal") != std::string::npos; },
      seconds(15)))
      << sub.log();
  EXPECT_NE(sub.log().find("nowhere"), std::string::npos) << sub.log();
  EXPECT_NE(sub.log().find("does not exist"), std::string::npos) << sub.log();
  const auto signalled = std::chrono::steady_clock::now();
  sub.signal(SIGTERM);
  EXPECT_EQ(sub.wait_exit(seconds(5)), 0) << sub.log();
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, milliseconds(1500));

  // A publisher whose coordinator never answers: the endpoint named, at a bounded rate.
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log");
  ASSERT_TRUE(eventually(
      [&] {
        return publisher.log().find("no Welcome from the coordinator at") != std::string::npos;
      },
      seconds(15)))
      << publisher.log();
  EXPECT_NE(publisher.log().find(g.config().coordinator_endpoint()), std::string::npos);
  EXPECT_LE(count(publisher.log(), "no Welcome from the coordinator"), 2u) << publisher.log();
  publisher.signal(SIGTERM);
  EXPECT_EQ(publisher.wait_exit(seconds(5)), 0) << publisher.log();

  // A coordinator host that does not resolve (.invalid never does, RFC 6761) is named so.
  const std::string endpoint = g.config().coordinator_endpoint();
  const std::string unresolved = g.write_config_variant(
      "unresolved.yaml", with(g.yaml(), endpoint, "tcp://no-such-host.invalid:5555"));
  RankProcess lost(unresolved, 1, g.dir() + "/r1b.log");
  ASSERT_TRUE(eventually(
      [&] {
        return lost.log().find("host 'no-such-host.invalid' does not resolve") != std::string::npos;
      },
      seconds(30)))
      << lost.log();
  lost.signal(SIGTERM);
  EXPECT_EQ(lost.wait_exit(seconds(5)), 0) << lost.log();
}

TEST(GroupHardening, ACoordinatorWhoseJournalRootIsAFileDoesNotStart) {
  GroupSpec spec;
  TestGroup g(spec);
  std::ofstream(g.journal()) << "not a directory\n";
  RankProcess coordinator(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  const auto code = coordinator.wait_exit(seconds(20));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_NE(coordinator.log().find("is not a directory"), std::string::npos) << coordinator.log();
  EXPECT_NE(coordinator.log().find(g.journal()), std::string::npos) << coordinator.log();
}

}  // namespace
}  // namespace weightcast::testing
