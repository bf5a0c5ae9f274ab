// The in-process broadcast group (tests/support/loopback_broadcast_group.h): parts owned by
// different ranks reach every member that asks for them; mismatches, deadlines, abort() and a
// member leaving break the whole group, stickily, without hanging anyone.
#include "tests/support/loopback_broadcast_group.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

namespace weightcast::nccl {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::vector<std::unique_ptr<BroadcastGroup>> group_of(int ranks) {
  auto members = make_loopback_group(ranks);
  EXPECT_TRUE(members.ok()) << members.status().to_string();
  return std::move(members).value();
}

// Polls `condition` every millisecond for up to 10 s: the ordering a test needs is an event
// it waits on, not a sleep.
bool eventually(const std::function<bool()>& condition) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Runs `body(rank)` on one thread per member and returns each member's status.
std::vector<Status> run_members(int ranks, const std::function<Status(int)>& body) {
  std::vector<Status> out(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { out[r] = body(r); });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<uint8_t> bytes_of(int part, size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(part * 31 + i * 7);
  return b;
}

TEST(LoopbackBroadcastGroup, PartsOwnedByDifferentRanksReachEveryMember) {
  auto members = group_of(3);
  const std::vector<SchedulePart> parts{{"a", 100, 0}, {"b", 0, 1}, {"c", 4096, 2}, {"d", 7, 1}};
  std::vector<std::vector<uint8_t>> expected;
  for (size_t i = 0; i < parts.size(); ++i) expected.push_back(bytes_of(int(i), parts[i].bytes));
  std::vector<std::vector<std::vector<uint8_t>>> got(3);
  auto statuses = run_members(3, [&](int r) {
    std::vector<std::span<const uint8_t>> sources(parts.size());
    std::vector<std::span<uint8_t>> dests(parts.size());
    got[r].resize(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].owner == r) sources[i] = expected[i];
      got[r][i].assign(parts[i].bytes, 0xEE);
      dests[i] = got[r][i];
    }
    for (int round = 0; round < 3; ++round) {  // the group is reusable
      RETURN_IF_ERROR(
          members[r]->broadcast(parts, sources, dests, Clock::now() + milliseconds(5000)));
    }
    return ok_status();
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].to_string();
    EXPECT_EQ(members[r]->rank(), r);
    EXPECT_EQ(members[r]->size(), 3);
    for (size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(got[r][i], expected[i]) << r << " " << i;
  }
}

TEST(LoopbackBroadcastGroup, MembersMayWantNothing) {
  auto members = group_of(3);
  const std::vector<SchedulePart> parts{{"a", 64, 0}, {"b", 32, 0}};
  const auto a = bytes_of(1, 64), b = bytes_of(2, 32);
  std::vector<uint8_t> got_b(32);
  auto statuses = run_members(3, [&](int r) {
    const std::vector<std::span<const uint8_t>> sources{a, b};
    std::vector<std::span<uint8_t>> dests(2);
    if (r == 2) dests[1] = got_b;  // rank 2 wants b only; rank 1 nothing (empty list)
    return members[r]->broadcast(parts, r == 0 ? std::span(sources) : std::span(sources).first(0),
                                 r == 2 ? std::span(dests) : std::span(dests).first(0),
                                 Clock::now() + milliseconds(5000));
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(got_b, b);
}

TEST(LoopbackBroadcastGroup, MismatchedSizesFailOnEveryMemberNamingThePart) {
  auto members = group_of(3);
  const auto src = bytes_of(0, 100);
  auto statuses = run_members(3, [&](int r) {
    const std::vector<SchedulePart> parts{{"ok", 0, 0}, {"weights", r == 1 ? 99u : 100u, 0}};
    const std::vector<std::span<const uint8_t>> sources{{}, src};
    return members[r]->broadcast(parts, sources, {}, Clock::now() + milliseconds(5000));
  });
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("'weights'"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("is broken"), std::string::npos) << s.to_string();
  }
}

TEST(LoopbackBroadcastGroup, WrongDestinationOrSourceSizeFails) {
  const std::vector<SchedulePart> parts{{"w", 16, 0}};
  const auto src = bytes_of(0, 16);
  for (const bool bad_source : {false, true}) {
    auto members = group_of(2);
    std::vector<uint8_t> dest(15);
    auto statuses = run_members(2, [&](int r) {
      const std::vector<std::span<const uint8_t>> sources{bad_source ? std::span(src).first(8)
                                                                     : std::span(src)};
      const std::vector<std::span<uint8_t>> dests{dest};
      return members[r]->broadcast(parts, r == 0 ? std::span(sources) : std::span(sources).first(0),
                                   r == 1 ? std::span(dests) : std::span(dests).first(0),
                                   Clock::now() + milliseconds(5000));
    });
    for (const Status& s : statuses) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
      EXPECT_NE(s.message().find(bad_source ? "source" : "destination"), std::string::npos)
          << s.to_string();
    }
  }
}

TEST(LoopbackBroadcastGroup, AbsentMemberIsADeadlineForTheOthersAndBreaksTheGroup) {
  auto members = group_of(3);
  const std::vector<SchedulePart> parts{{"p", 8, 0}};
  const auto src = bytes_of(0, 8);
  const auto start = Clock::now();
  auto statuses = run_members(2, [&](int r) {  // rank 2 never comes
    const std::vector<std::span<const uint8_t>> sources{src};
    return members[r]->broadcast(parts, r == 0 ? std::span(sources) : std::span(sources).first(0),
                                 {}, Clock::now() + milliseconds(200));
  });
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
    EXPECT_NE(s.message().find("rank(s) 2"), std::string::npos) << s.to_string();
  }
  // Broken for good: the latecomer and every later call fail at once, kUnavailable naming the
  // first error.
  const auto again = Clock::now();
  Status late = members[2]->broadcast(parts, {}, {}, Clock::now() + milliseconds(5000));
  EXPECT_EQ(late.code(), StatusCode::kUnavailable) << late.to_string();
  EXPECT_NE(late.message().find("rank(s) 2"), std::string::npos) << late.to_string();
  EXPECT_LT(Clock::now() - again, milliseconds(1000));
}

TEST(LoopbackBroadcastGroup, PastDeadlineBreaksTheGroup) {
  auto members = group_of(1);
  Status s = members[0]->broadcast({}, {}, {}, Clock::now() - milliseconds(1));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_FALSE(members[0]->broadcast({}, {}, {}, Clock::now() + milliseconds(1000)).ok());
}

TEST(LoopbackBroadcastGroup, AbortFromAnotherThreadWakesAWaitingBroadcast) {
  auto members = group_of(2);
  const auto start = Clock::now();
  std::thread aborter([&] {
    // Once rank 0 waits in its broadcast (the call this test is about), not before.
    ASSERT_TRUE(eventually([&] { return loopback_members_in_broadcast(*members[1]) == 1; }));
    members[1]->abort("operator stopped the epoch");
  });
  Status s = members[0]->broadcast({}, {}, {}, Clock::now() + milliseconds(10'000));
  aborter.join();
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
  EXPECT_NE(s.message().find("operator stopped the epoch"), std::string::npos) << s.to_string();
  // The first error stays: a later abort does not replace it.
  members[0]->abort("second reason");
  Status later = members[1]->broadcast({}, {}, {}, Clock::now() + milliseconds(1000));
  EXPECT_NE(later.message().find("operator stopped the epoch"), std::string::npos)
      << later.to_string();
}

TEST(LoopbackBroadcastGroup, DestroyedMemberIsAnAbort) {
  auto members = group_of(2);
  std::thread leaver([&] {
    ASSERT_TRUE(eventually([&] { return loopback_members_in_broadcast(*members[1]) == 1; }));
    members[1].reset();
  });
  const auto start = Clock::now();
  Status s = members[0]->broadcast({}, {}, {}, Clock::now() + milliseconds(10'000));
  leaver.join();
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
  EXPECT_NE(s.message().find("member 1 left the group"), std::string::npos) << s.to_string();
}

TEST(LoopbackBroadcastGroupFactory, JoinWaitsForEveryMember) {
  LoopbackBroadcastGroupFactory factory;
  EXPECT_EQ(factory.name(), "loopback");
  auto id = factory.make_id();
  ASSERT_TRUE(id.ok());
  auto other = factory.make_id();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*id, *other);
  std::vector<std::unique_ptr<BroadcastGroup>> members(3);
  auto statuses = run_members(3, [&](int r) {
    auto m = factory.join(*id, 3, r, Clock::now() + milliseconds(5000));
    if (!m.ok()) return m.status();
    members[r] = std::move(m).value();
    return ok_status();
  });
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s.to_string();
  std::vector<uint8_t> src = bytes_of(5, 10);
  std::vector<std::vector<uint8_t>> got(3, std::vector<uint8_t>(10));
  statuses = run_members(3, [&](int r) {
    const std::vector<SchedulePart> parts{{"x", 10, 1}};
    const std::vector<std::span<const uint8_t>> sources{src};
    const std::vector<std::span<uint8_t>> dests{got[r]};
    return members[r]->broadcast(parts, sources, dests, Clock::now() + milliseconds(5000));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << statuses[r].to_string();
    EXPECT_EQ(got[r], src);
  }
}

TEST(LoopbackBroadcastGroupFactory, JoinDeadlineNamesRankAndSize) {
  LoopbackBroadcastGroupFactory factory;
  auto id = factory.make_id();
  ASSERT_TRUE(id.ok());
  const auto start = Clock::now();
  auto m = factory.join(*id, 3, 1, Clock::now() + milliseconds(200));
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDeadlineExceeded) << m.status().to_string();
  EXPECT_NE(m.status().message().find("rank 1 of 3"), std::string::npos) << m.status().to_string();
  EXPECT_NE(m.status().message().find("missing 0 2"), std::string::npos) << m.status().to_string();
}

TEST(LoopbackBroadcastGroupFactory, DuplicateRankAndConflictingSizeAreRefused) {
  LoopbackBroadcastGroupFactory factory;
  auto id = factory.make_id();
  ASSERT_TRUE(id.ok());
  std::thread first([&] {
    auto m = factory.join(*id, 2, 0, Clock::now() + milliseconds(1000));
    EXPECT_EQ(m.status().code(), StatusCode::kDeadlineExceeded);
  });
  // The refusals below need rank 0 waiting in its join.
  EXPECT_TRUE(eventually([&] { return loopback_members_joining(*id) == 1; }));
  auto dup = factory.join(*id, 2, 0, Clock::now() + milliseconds(200));
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument) << dup.status().to_string();
  EXPECT_NE(dup.status().message().find("rank 0 of 2"), std::string::npos);
  auto size = factory.join(*id, 3, 1, Clock::now() + milliseconds(200));
  EXPECT_EQ(size.status().code(), StatusCode::kInvalidArgument) << size.status().to_string();
  EXPECT_NE(size.status().message().find("size 2"), std::string::npos) << size.status().to_string();
  auto no_rank = factory.join(*id, 2, 2, Clock::now() + milliseconds(200));
  EXPECT_EQ(no_rank.status().code(), StatusCode::kInvalidArgument);
  first.join();
}

}  // namespace
}  // namespace weightcast::nccl
