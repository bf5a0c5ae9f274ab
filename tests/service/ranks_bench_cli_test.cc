// `weightcast bench ranks` as a user runs it: help, and small runs of both splits (FSDP-like
// flat ranges, tensor-parallel column blocks) whose JSON holds every figure beside its
// reference: each engine rank read exactly the records its slice meets, and with column
// blocks the engine holding half of the columns read half of the records; a wrong split is
// refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/service/run_command.h"

namespace weightcast {
namespace {

using testing::run_cli;

nlohmann::json parse_json(const std::string& output) {
  const size_t from = output.find("\n{\n");
  if (from == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(output.substr(from + 1), nullptr, /*allow_exceptions=*/false);
}

TEST(RanksBenchCli, HasHelp) {
  auto r = run_cli("bench ranks --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* option : {"--ranks", "--split", "columns", "--piece-elements", "268435456"}) {
    EXPECT_NE(r.output.find(option), std::string::npos) << option << "\n" << r.output;
  }
  auto wrong = run_cli("bench ranks --split rows");
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("--split"), std::string::npos) << wrong.output;
}

TEST(RanksBenchCli, BothSplitsReadExactlyTheRecordsTheirSlicesMeet) {
  for (const std::string split : {"flat", "columns"}) {
    auto r = run_cli("bench ranks --parameters 2097152 --tensors 4 --versions 3 --split " + split);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = parse_json(r.output);
    ASSERT_TRUE(j.is_object()) << r.output;
    EXPECT_EQ(j["split"], split);
    EXPECT_DOUBLE_EQ(j["figures"]["engine_bytes_read_vs_intersecting_records_max"].get<double>(),
                     1.0)
        << j.dump(2);
    EXPECT_GT(j["figures"]["delta_publish_rank0_vs_single_median"].get<double>(), 0.0);
    ASSERT_EQ(j["readers"].size(), 2u);
    const auto read = [&](size_t reader) {
      uint64_t bytes = 0;
      for (const auto& v : j["readers"][reader]["versions"])
        bytes += v["bytes_read"].get<uint64_t>();
      return bytes;
    };
    // Every rank cuts its records along both layouts' halves (rank_cells.h), so each engine
    // (rows 0:half, columns 0:half) reads the records of its half only, whatever the split.
    uint64_t records = 0;
    for (const auto& rank : j["ranks_detail"]) {
      for (size_t v = 1; v < rank["stored_bytes"].size(); ++v) {
        records += rank["stored_bytes"][v].get<uint64_t>();
      }
    }
    for (size_t reader = 0; reader < 2; ++reader) {
      EXPECT_NEAR(static_cast<double>(read(reader)) / static_cast<double>(records), 0.5, 0.05)
          << split << " reader " << reader << "\n"
          << j.dump(2);
    }
  }
}

}  // namespace
}  // namespace weightcast
