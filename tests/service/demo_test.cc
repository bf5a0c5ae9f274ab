// The demo `make demo` runs must succeed end to end and show both refusals.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "tests/service/run_command.h"

#include <array>
#include <cstdio>
#include <string>

namespace {

TEST(Demo, SmallModelRunsAndRefusesReplayAndCorruption) {
  const auto [exit_code, out] = weightcast::testing::run_command(std::string(WEIGHTCAST_DEMO_PATH) +
                                                                 " --scale 0.03 --steps 2");
  EXPECT_EQ(exit_code, 0) << out;
  EXPECT_NE(out.find("bit-identical to the trainer"), std::string::npos) << out;
  EXPECT_NE(out.find("refusing to apply"), std::string::npos) << out;
  EXPECT_NE(out.find("applying a corrupted copy: DATA_LOSS"), std::string::npos) << out;
  EXPECT_NE(out.find("engine weights after both refusals: unchanged"), std::string::npos) << out;
}

}  // namespace
