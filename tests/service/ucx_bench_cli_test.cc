// `weightcast bench ucx` (bench/drivers/ucx_benchmark.h): its help, one small real run against
// ucx_perftest, and the reading of ucx_perftest's output. Only in builds with UCX.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/service/run_command.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_UCX
#include "bench/drivers/ucx_perftest.h"

namespace weightcast {
namespace {

using testing::run_cli;

// A client's output as ucx_perftest 1.13 prints it (16 MiB gets, 50 iterations).
constexpr const char* kPerftestOutput =
    "+--------------+--------------+------------------------------+---------------------+\n"
    "|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |\n"
    "Final:                    50   3295.677  3403.163  3403.163     4701.51    4701.51       "
    "  294         294\n";

TEST(UcxPerftestOutput, FinalBandwidthIsMiBPerSecondReadAsDecimalGB) {
  auto gbps = parse_perftest_gbps(kPerftestOutput, 16 << 20);
  ASSERT_TRUE(gbps.ok()) << gbps.status().to_string();
  EXPECT_NEAR(*gbps, 4701.51 * 1048576 / 1e9, 1e-9);  // 4.93 GB/s, not 4.70
}

TEST(UcxPerftestOutput, EmptyLastIntervalIsStillRead) {
  // The "average" columns cover the last report interval, which can be empty.
  auto gbps = parse_perftest_gbps(
      "Final:                    64  34329.751       inf 32562.640        0.00     491.36        "
      "   0          31\n",
      16 << 20);
  ASSERT_TRUE(gbps.ok()) << gbps.status().to_string();
  EXPECT_NEAR(*gbps, 491.36 * 1048576 / 1e9, 1e-9);
}

TEST(UcxPerftestOutput, UnreadableOrInconsistentLinesAreNamed) {
  auto none = parse_perftest_gbps("Waiting for connection...\n", 1 << 20);
  EXPECT_EQ(none.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(none.status().message().find("Waiting for connection"), std::string::npos);

  auto garbled = parse_perftest_gbps("Final: 50 3295.677 n/a\n", 1 << 20);
  EXPECT_EQ(garbled.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(garbled.status().message().find("Final: 50 3295.677 n/a"), std::string::npos);

  // The same line claimed for a different message size: bandwidth and latency disagree.
  auto wrong = parse_perftest_gbps(kPerftestOutput, 16'000'000);
  EXPECT_EQ(wrong.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(wrong.status().message().find("unit or layout"), std::string::npos);
}

TEST(BenchUcxCli, Help) {
  auto r = run_cli("bench ucx --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* option : {"--tls", "--sizes", "--iterations", "--perftest", "--json"}) {
    EXPECT_NE(r.output.find(option), std::string::npos) << option;
  }
}

TEST(BenchUcxCli, PerftestThatIsNotExecutableIsNamed) {
  auto r = run_cli("bench ucx --tls shm --sizes 4096 --perftest /nonexistent/ucx_perftest");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/ucx_perftest"), std::string::npos) << r.output;
}

TEST(BenchUcxCli, SmallShmRunPrintsTheRequiredJson) {
  auto perftest = find_ucx_perftest("");
  if (!perftest.ok()) GTEST_SKIP() << perftest.status().message();
  auto r = run_cli("bench ucx --json --tls shm --sizes 1048576 --iterations 50 --repetitions 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Progress lines go to stderr, which run_cli merges: the JSON object starts at the first '{'.
  const size_t at = r.output.find('{');
  ASSERT_NE(at, std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(at));
  // One case per publisher memory (in_place, copy), in that order.
  ASSERT_EQ(j["cases"].size(), 2u) << j.dump();
  for (size_t i = 0; i < 2; ++i) {
    const auto& c = j["cases"][i];
    EXPECT_EQ(c["tls"], "shm");
    EXPECT_EQ(c["publisher_memory"], i == 0 ? "in_place" : "copy");
    // Over shm a copy is mapped into the subscriber and read by loads; in-place memory is not.
    EXPECT_EQ(c["subscriber_reads"], i == 0 ? "gets" : "loads");
    EXPECT_EQ(c["part_bytes"], 1048576);
    for (const char* key : {"weightcast_gbps", "perftest_gbps", "ratio"}) {
      ASSERT_TRUE(c.contains(key)) << key;
      EXPECT_GT(c[key].get<double>(), 0.0) << key;
    }
  }
  EXPECT_GT(j["chunk_bytes"].get<double>(), 0.0);
  EXPECT_GT(j["max_in_flight"].get<double>(), 0.0);
}

}  // namespace
}  // namespace weightcast
#endif  // WEIGHTCAST_HAVE_UCX
