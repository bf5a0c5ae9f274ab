// WaitReporter: silent for a short wait, then one line, then one per period, on a fake clock.
#include "src/control/wait_reporter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weightcast {
namespace {

using std::chrono::milliseconds;

TEST(WaitReporter, SilentFirstThenAtMostOneLinePerPeriod) {
  std::vector<std::string> lines;
  WaitReporter::Clock::time_point now{};
  WaitReporter w([&](const std::string& l) { lines.push_back(l); }, milliseconds(3000),
                 milliseconds(30000), [&] { return now; });
  // A wait of 2.9 s polled every 10 ms says nothing.
  for (int i = 0; i < 290; ++i, now += milliseconds(10)) EXPECT_FALSE(w.report("waiting for x"));
  EXPECT_TRUE(lines.empty());
  now += milliseconds(100);
  EXPECT_TRUE(w.report("waiting for x"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "waiting for x (waiting 3 s)");
  // 100 s more of polling every 10 ms: one line every 30 s.
  for (int i = 0; i < 10000; ++i, now += milliseconds(10)) (void)w.report("waiting for x");
  EXPECT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines.back(), "waiting for x (waiting 93 s)");
}

TEST(WaitReporter, RestartTimesANewWait) {
  std::vector<std::string> lines;
  WaitReporter::Clock::time_point now{};
  WaitReporter w([&](const std::string& l) { lines.push_back(l); }, milliseconds(1000),
                 milliseconds(5000), [&] { return now; });
  (void)w.report("a");
  now += milliseconds(1500);
  EXPECT_TRUE(w.report("a"));
  w.restart();
  EXPECT_FALSE(w.report("b"));  // a new wait: silent again for its first second
  now += milliseconds(999);
  EXPECT_FALSE(w.report("b"));
  now += milliseconds(1);
  EXPECT_TRUE(w.report("b"));
  EXPECT_EQ(lines.size(), 2u);
}

}  // namespace
}  // namespace weightcast
