// The targets of `weightcast bench group` (bench/drivers/group_bench_targets.h) on a demo report
// written by hand: each bound as the header states it, versions not acked by every subscriber left
// out, figures not reported evaluated as n/a (and failing a check), and the fallbacks named.
#include "bench/drivers/group_bench_targets.h"

#include <gtest/gtest.h>

namespace weightcast {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = uint64_t{1} << 20;

json result(uint32_t rank, uint64_t written, uint64_t rss, uint64_t engine) {
  return {{"rank", rank},          {"result", "ok"},           {"transport", "fs"},
          {"bytes_read", 1000},    {"bytes_written", written}, {"peak_rss_bytes", rss},
          {"engine_bytes", engine}};
}

// v0 anchor, v1 delta nobody acked (published before the subscriber joined), v2 the first the
// subscriber acked (where it joined), v3 and v4 steady deltas.
json demo_report(uint64_t subscriber_rss) {
  const uint64_t engine = 256 * kMiB;
  json versions = json::array();
  versions.push_back({{"version", 0},
                      {"anchor", true},
                      {"stored_bytes", engine},
                      {"publish_to_commit_ms", 900.0},
                      {"publisher_peak_rss_bytes", 1000 * kMiB},
                      {"publisher_model_bytes", engine},
                      {"results", json::array()}});
  versions.push_back({{"version", 1},
                      {"anchor", false},
                      {"stored_bytes", 9 * kMiB},  // the largest delta, though nobody acked it
                      {"publish_to_commit_ms", 1.0},
                      {"results", json::array()}});
  versions.push_back({{"version", 2},
                      {"anchor", false},
                      {"stored_bytes", 2 * kMiB},
                      {"publish_to_commit_ms", 300.0},
                      {"results", {result(2, 2000, subscriber_rss, engine)}}});
  versions.push_back({{"version", 3},
                      {"anchor", false},
                      {"stored_bytes", 2 * kMiB},
                      {"publish_to_commit_ms", 500.0},
                      {"results", {result(2, 5000, subscriber_rss, engine)}}});
  versions.push_back({{"version", 4},
                      {"anchor", false},
                      {"stored_bytes", 2 * kMiB},
                      {"publish_to_commit_ms", 240.0},
                      {"results", {result(2, 3000, subscriber_rss, engine)}}});
  json ranks = {{{"rank", 0}, {"role", "coordinator"}, {"vm_hwm_bytes", 0}},
                {{"rank", 1}, {"role", "publisher"}, {"vm_hwm_bytes", 0}},
                {{"rank", 2}, {"role", "subscriber"}, {"vm_hwm_bytes", 999 * kMiB}}};
  return {{"versions", versions}, {"ranks", ranks}};
}

CodecReference reference() {
  CodecReference c;
  // 1000 changed bf16 elements: bytes_written bound 2 x 1000 x 2 = 4000.
  c.versions.push_back({2, 1000, 10, 2, 1500, 0.100, 0.100});  // 200 ms: ratio 1.5
  c.versions.push_back({3, 1000, 10, 2, 1500, 0.100, 0.150});  // 250 ms: ratio 2
  c.versions.push_back({4, 1000, 10, 2, 1500, 0.100, 0.100});  // 200 ms: ratio 1.2
  return c;
}

const json* find_target(const json& run, const std::string& name, int64_t version = -1) {
  for (const auto& t : run["targets"]) {
    if (t["target"] != name) continue;
    if (version >= 0 && t.value("version", int64_t{-1}) != version) continue;
    return &t;
  }
  return nullptr;
}

TEST(GroupBenchTargets, BoundsAsStatedAndOnlyVersionsEveryoneAcked) {
  const CodecReference codec = reference();
  const json run = summarize_group_run(demo_report(256 * kMiB + 70 * kMiB), &codec, {});
  EXPECT_EQ(run["largest_delta_bytes"], 9 * kMiB);

  const json* rss = find_target(run, "subscriber_rss");
  ASSERT_NE(rss, nullptr);
  EXPECT_EQ(rss->at("measured"), 70 * kMiB);  // the ack's peak RSS, not the VmHWM fallback
  EXPECT_DOUBLE_EQ(rss->at("bound").get<double>(), 64.0 * kMiB + 2 * 9.0 * kMiB);
  EXPECT_EQ(rss->at("pass"), true);

  // v1 is listed but nobody acked it; v2 is the subscriber's first ack (where it joined: its
  // 2000 bytes and 300 ms are not a step's); v3 counts, and wrote 5000 > 4000.
  EXPECT_EQ(run["versions"][1]["acked_by_all"], false);
  EXPECT_EQ(run["versions"][2]["acked_by_all"], true);
  EXPECT_EQ(run["versions"][2]["counted"], false);
  EXPECT_EQ(run["versions"][3]["counted"], true);
  EXPECT_EQ(find_target(run, "bytes_written", 1), nullptr);
  EXPECT_EQ(find_target(run, "bytes_written", 2), nullptr);
  EXPECT_DOUBLE_EQ(find_target(run, "bytes_written", 3)->at("bound").get<double>(), 4000);
  EXPECT_EQ(find_target(run, "bytes_written", 3)->at("pass"), false);

  EXPECT_EQ(find_target(run, "bytes_written", 4)->at("pass"), true);

  // Counted ratios 500/250 and 240/200: their median 1.6 > 1.5.
  EXPECT_TRUE(run["versions"][2]["ratio"].is_null());
  EXPECT_DOUBLE_EQ(run["median_delta_ratio"].get<double>(), 1.6);
  EXPECT_EQ(find_target(run, "all_acked_vs_codec")->at("pass"), false);

  const json runs = json::array({run});
  std::vector<std::string> failed;
  EXPECT_TRUE(targets_pass(runs, {"subscriber_rss"}, &failed));
  EXPECT_FALSE(targets_pass(runs, {"subscriber_rss", "bytes_written"}, &failed));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0].find("v3"), std::string::npos) << failed[0];
}

TEST(GroupBenchTargets, SlackMultipliesEveryBound) {
  const CodecReference codec = reference();
  GroupBenchBounds bounds;
  bounds.slack = 2;
  const json run = summarize_group_run(demo_report(256 * kMiB + 100 * kMiB), &codec, bounds);
  EXPECT_DOUBLE_EQ(find_target(run, "subscriber_rss")->at("bound").get<double>(),
                   2 * (64.0 * kMiB + 2 * 9.0 * kMiB));
  EXPECT_EQ(find_target(run, "subscriber_rss")->at("pass"), true);
  EXPECT_EQ(find_target(run, "bytes_written", 3)->at("pass"), true);
  EXPECT_EQ(find_target(run, "all_acked_vs_codec")->at("pass"), true);
}

TEST(GroupBenchTargets, UnreportedFiguresAreNotEvaluatedAndFallBacksAreNamed) {
  json demo = demo_report(0);  // the subscriber's acks carry no peak RSS
  for (auto& v : demo["versions"]) {
    for (auto& r : v["results"]) r["bytes_written"] = 0, r["engine_bytes"] = 0;
  }
  const json run = summarize_group_run(demo, nullptr, {});
  const json& sub = run["ranks"][1];
  EXPECT_EQ(sub["peak_rss_source"], "vm_hwm");
  EXPECT_EQ(sub["own_bytes_source"], "publisher_model_bytes");
  EXPECT_EQ(sub["peak_rss_minus_engine_bytes"], 999 * kMiB - 256 * kMiB);
  EXPECT_EQ(run["ranks"][0]["peak_rss_source"], "offer");

  const json* written = find_target(run, "bytes_written", 3);
  ASSERT_NE(written, nullptr);
  EXPECT_TRUE(written->at("pass").is_null());
  EXPECT_TRUE(find_target(run, "all_acked_vs_codec")->at("pass").is_null());
  std::vector<std::string> failed;
  EXPECT_FALSE(targets_pass(json::array({run}), {"all_acked_vs_codec"}, &failed));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[0].find("not evaluated"), std::string::npos) << failed[0];
}

}  // namespace
}  // namespace weightcast
