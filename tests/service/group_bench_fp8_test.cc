// The FP8 target of `weightcast bench group` (bench/drivers/group_bench_fp8.h) on summaries written
// by hand: delta bytes summed over the versions both runs published as deltas, anchors apart, and
// a version that is a delta in one run and an anchor in the other left out.
#include "bench/drivers/group_bench_fp8.h"

#include <gtest/gtest.h>

namespace weightcast {
namespace {

using nlohmann::json;

json summary(const std::string& label, const std::vector<std::pair<std::string, uint64_t>>& v) {
  json versions = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    versions.push_back({{"version", i}, {"kind", v[i].first}, {"stored_bytes", v[i].second}});
  }
  return {{"label", label}, {"versions", versions}, {"targets", json::array()}};
}

const json* target(const json& run, const std::string& name) {
  for (const auto& t : run["targets"]) {
    if (t["target"] == name) return &t;
  }
  return nullptr;
}

TEST(GroupBenchFp8, DeltaBytesOfTheVersionsBothPublishedAsDeltas) {
  const json bf16 = summary(
      "fs", {{"anchor", 1000}, {"delta", 100}, {"delta", 100}, {"delta", 300}, {"anchor", 1000}});
  // v3 is an anchor here (say, a retry): it is compared with neither kind.
  json fp8 = summary(
      "fs-fp8", {{"anchor", 600}, {"delta", 30}, {"delta", 50}, {"anchor", 600}, {"anchor", 600}});
  compare_fp8_run(bf16, &fp8, {});
  const json& f = fp8["fp8"];
  EXPECT_EQ(f["compared_with"], "fs");
  EXPECT_EQ(f["delta_versions"], json({1, 2}));
  EXPECT_EQ(f["fp8_delta_bytes"], 80u);
  EXPECT_EQ(f["bf16_delta_bytes"], 200u);
  EXPECT_DOUBLE_EQ(f["delta_ratio"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(f["anchor_ratio"].get<double>(), 0.6);
  const json* t = target(fp8, "fp8_delta_bytes_vs_bf16");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ((*t)["pass"], true);
  EXPECT_DOUBLE_EQ((*t)["bound"].get<double>(), 0.5);

  json worse = summary("fs-fp8", {{"anchor", 600}, {"delta", 60}, {"delta", 70}});
  GroupBenchBounds b;
  b.slack = 1.2;  // bound 0.6: 0.65 still fails
  compare_fp8_run(bf16, &worse, b);
  EXPECT_EQ((*target(worse, "fp8_delta_bytes_vs_bf16"))["pass"], false);
}

TEST(GroupBenchFp8, NoCommonDeltaIsNotEvaluatedAndSaysWhy) {
  const json bf16 = summary("fs", {{"anchor", 1000}});
  json fp8 = summary("fs-fp8", {{"anchor", 600}, {"delta", 10}});
  compare_fp8_run(bf16, &fp8, {});
  const json* t = target(fp8, "fp8_delta_bytes_vs_bf16");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE((*t)["pass"].is_null());
  EXPECT_NE((*t)["why"].get<std::string>().find("no version"), std::string::npos);
}

}  // namespace
}  // namespace weightcast
