// RateLimitedLog on a fake clock: bursts pass, the rest become one exact summary per interval,
// keys are independent, poll() and flush() report a burst that stopped, and concurrent
// callers lose no count.
#include "src/control/rate_limited_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace weightcast {
namespace {

using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

constexpr const char* kSummary = "control: refused {} connections from unauthenticated peers";

struct Harness {
  TimePoint now{};
  std::vector<std::string> lines;
  RateLimitedLog log{[this](const std::string& line) { lines.push_back(line); },
                     RateLimitOptions{.burst = 5, .interval = 10s}, [this] { return now; }};

  void refuse(int i) {
    log.log("refused-peer", "refused peer " + std::to_string(i), kSummary,
            "peer " + std::to_string(i));
  }
};

// The count in each summary line, summed; also checks the summary's wording.
uint64_t summarized(const std::vector<std::string>& lines) {
  static const std::regex kLine(
      "control: refused ([0-9]+) connections from unauthenticated peers in the last [0-9]+ s "
      "\\(last: peer [0-9]+\\)");
  uint64_t sum = 0;
  for (const std::string& line : lines) {
    std::smatch m;
    if (std::regex_match(line, m, kLine)) sum += std::stoull(m[1]);
  }
  return sum;
}

size_t full_lines(const std::vector<std::string>& lines) {
  size_t n = 0;
  for (const std::string& line : lines) n += line.starts_with("refused peer ");
  return n;
}

TEST(RateLimitedLog, TenThousandRefusalsInOneIntervalWriteTheBurstAndOneSummary) {
  Harness h;
  for (int i = 0; i < 10000; ++i) h.refuse(i);
  ASSERT_EQ(h.lines.size(), 5u);
  EXPECT_EQ(h.lines[0], "refused peer 0");
  EXPECT_EQ(h.lines[4], "refused peer 4");
  h.now += 10s;
  h.log.poll();
  ASSERT_EQ(h.lines.size(), 6u);
  EXPECT_EQ(h.lines[5],
            "control: refused 9995 connections from unauthenticated peers in the last 10 s "
            "(last: peer 9999)");
  EXPECT_EQ(h.log.total("refused-peer"), 10000u);
  h.log.poll();
  h.log.flush();
  EXPECT_EQ(h.lines.size(), 6u) << "nothing left to report";
}

TEST(RateLimitedLog, SpreadOverManyIntervalsStaysBoundedAndCountsExactly) {
  Harness h;
  // 10,000 refusals, one every 10 ms: 100 s, ten intervals.
  for (int i = 0; i < 10000; ++i) {
    h.refuse(i);
    h.now += 10ms;
  }
  h.log.flush();
  const size_t intervals = 10;
  EXPECT_LE(h.lines.size(), intervals * (5 + 1) + 1);
  EXPECT_EQ(full_lines(h.lines) + summarized(h.lines), 10000u);
  for (const std::string& line : h.lines) {
    if (!line.starts_with("refused peer ")) {
      EXPECT_NE(line.find("in the last 10 s"), std::string::npos) << line;
    }
  }
}

TEST(RateLimitedLog, TheNextEventAfterTheIntervalWritesTheSummaryAndANewBurst) {
  Harness h;
  for (int i = 0; i < 7; ++i) h.refuse(i);
  h.now += 25s;
  h.refuse(7);
  ASSERT_EQ(h.lines.size(), 7u);
  EXPECT_EQ(h.lines[5],
            "control: refused 2 connections from unauthenticated peers in the last 25 s "
            "(last: peer 6)");
  EXPECT_EQ(h.lines[6], "refused peer 7");
}

TEST(RateLimitedLog, KeysAreLimitedSeparately) {
  Harness h;
  for (int i = 0; i < 20; ++i) {
    h.log.log("a", "a line", "{} a events", "a");
    h.log.log("b", "b line", "{} b events", "b");
  }
  EXPECT_EQ(h.lines.size(), 10u);
  h.log.flush();
  ASSERT_EQ(h.lines.size(), 12u);
  EXPECT_EQ(h.lines[10], "15 a events in the last 1 s (last: a)");
  EXPECT_EQ(h.lines[11], "15 b events in the last 1 s (last: b)");
  EXPECT_EQ(h.log.total("a"), 20u);
  EXPECT_EQ(h.log.total("missing"), 0u);
}

TEST(RateLimitedLog, PollBeforeTheIntervalEndsWritesNothing) {
  Harness h;
  for (int i = 0; i < 8; ++i) h.refuse(i);
  h.now += 9s;
  h.log.poll();
  EXPECT_EQ(h.lines.size(), 5u);
  h.now += 1s;
  h.log.poll();
  EXPECT_EQ(h.lines.size(), 6u);
}

TEST(RateLimitedLog, NullSinkOnlyCounts) {
  RateLimitedLog log(nullptr);
  EXPECT_TRUE(log.log("k", "line", "{} events", "d"));
  log.flush();
  EXPECT_EQ(log.total("k"), 1u);
}

TEST(RateLimitedLog, ConcurrentCallersLoseNoCount) {
  std::mutex mutex;
  std::vector<std::string> lines;
  RateLimitedLog log(
      [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(mutex);
        lines.push_back(line);
      },
      RateLimitOptions{.burst = 5, .interval = 1h});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&log] {
      for (int i = 0; i < 2500; ++i) log.log("k", "refused peer 0", kSummary, "peer 0");
    });
  }
  for (auto& t : threads) t.join();
  log.flush();
  EXPECT_EQ(lines.size(), 6u);
  EXPECT_EQ(full_lines(lines), 5u);
  EXPECT_EQ(summarized(lines), 9995u);
  EXPECT_EQ(log.total("k"), 10000u);
}

}  // namespace
}  // namespace weightcast
