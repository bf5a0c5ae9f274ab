// The demo `make demo` runs must succeed end to end and show both refusals.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

TEST(Demo, SmallModelRunsAndRefusesReplayAndCorruption) {
  const std::string cmd = std::string(WEIGHTCAST_DEMO_PATH) + " --scale 0.03 --steps 2 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("bit-identical to the trainer"), std::string::npos) << out;
  EXPECT_NE(out.find("refusing to apply"), std::string::npos) << out;
  EXPECT_NE(out.find("applying a corrupted copy: DATA_LOSS"), std::string::npos) << out;
  EXPECT_NE(out.find("engine weights after both refusals: unchanged"), std::string::npos) << out;
}

}  // namespace
