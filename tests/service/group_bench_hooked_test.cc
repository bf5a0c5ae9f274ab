// The publisher targets of `weightcast bench group` on reports written by hand: publisher_rss
// against the trainer's own bytes in both modes (bench/drivers/group_bench_targets.h), and a hooked
// run compared with a snapshot run (bench/drivers/group_bench_hooked.h): the medians of the write
// and publish ratios, and part files compared byte for byte, a one-byte difference caught.
#include "bench/drivers/group_bench_hooked.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace weightcast {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// v0 anchor, v1..v3 deltas of 2 MiB; the trainer's figures for each: publish_ms
// `publish[v]`, and in hooked mode write_ms 3 and plain_copy_ms 2 (ratio 1.5) except v2 (4 / 1).
json demo_report(const std::string& mode, uint64_t peak, const std::vector<double>& publish) {
  const uint64_t model = 100 * kMiB;
  json versions = json::array(), steps = json::array();
  for (uint64_t v = 0; v < 4; ++v) {
    versions.push_back({{"version", v},
                        {"anchor", v == 0},
                        {"stored_bytes", v == 0 ? model : 2 * kMiB},
                        {"publish_to_commit_ms", 10.0},
                        {"publisher_peak_rss_bytes", peak},
                        {"publisher_model_bytes", model},
                        {"results", json::array()}});
    steps.push_back({{"version", v},
                     {"mode", mode},
                     {"anchor", v == 0},
                     {"write_ms", v == 2 ? 4.0 : 3.0},
                     {"plain_copy_ms", v == 2 ? 1.0 : 2.0},
                     {"publish_ms", publish[v]},
                     {"trainer_bytes", 3 * model}});
  }
  json ranks = {{{"rank", 1}, {"role", "publisher"}, {"vm_hwm_bytes", 0}}};
  return {{"versions", versions},
          {"ranks", ranks},
          {"publisher_mode", mode},
          {"publisher_steps", steps}};
}

const json* find_target(const json& run, const std::string& name) {
  for (const auto& t : run["targets"]) {
    if (t["target"] == name) return &t;
  }
  return nullptr;
}

TEST(GroupBenchPublisher, RssBeyondTheTrainersBytesInEachMode) {
  // Snapshot: 300 MiB trainer + 104 MiB = 1.04 x the model: inside 1.05 x 100 MiB.
  json run = summarize_group_run(demo_report("snapshot", 404 * kMiB, {1, 1, 1, 1}), nullptr, {});
  EXPECT_EQ(run["publisher_mode"], "snapshot");
  ASSERT_EQ(run["ranks"].size(), 1u);
  EXPECT_EQ(run["ranks"][0]["trainer_bytes"], 300 * kMiB);
  EXPECT_EQ(run["ranks"][0]["peak_rss_minus_trainer_bytes"], 104 * kMiB);
  const json* t = find_target(run, "publisher_rss");
  ASSERT_NE(t, nullptr) << run.dump(2);
  EXPECT_DOUBLE_EQ((*t)["bound"].get<double>(), 1.05 * 100 * kMiB);
  EXPECT_EQ((*t)["pass"], true);
  // Hooked: the bound is 64 MiB + 2 x the largest delta (2 MiB) = 68 MiB; 104 MiB fails it.
  run = summarize_group_run(demo_report("hooked", 404 * kMiB, {1, 1, 1, 1}), nullptr, {});
  t = find_target(run, "publisher_rss");
  ASSERT_NE(t, nullptr);
  EXPECT_DOUBLE_EQ((*t)["bound"].get<double>(), 68.0 * kMiB);
  EXPECT_EQ((*t)["pass"], false);
  // The trainer's write figures are a hooked run's only.
  EXPECT_EQ(run["versions"][1]["write_ms"], 3.0);
  json snap = summarize_group_run(demo_report("snapshot", 404 * kMiB, {1, 1, 1, 1}), nullptr, {});
  EXPECT_TRUE(snap["versions"][1]["write_ms"].is_null());
  EXPECT_EQ(snap["versions"][1]["publish_ms"], 1.0);
  // Without the trainer's figures the target is n/a, with the reason.
  json bare = demo_report("snapshot", 404 * kMiB, {1, 1, 1, 1});
  bare.erase("publisher_steps");
  run = summarize_group_run(bare, nullptr, {});
  t = find_target(run, "publisher_rss");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE((*t)["pass"].is_null());
  EXPECT_TRUE(t->contains("why"));
}

class JournalPair : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("weightcast-bench-hooked-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    for (const char* j : {"snap", "hooked"}) {
      for (uint64_t v = 1; v < 4; ++v)
        write(j, v, "part-00000.wcd", "records of v" + std::to_string(v));
      // Manifests differ (times, writer) and are not compared.
      for (uint64_t v = 1; v < 4; ++v) write(j, v, "MANIFEST", std::string("written by ") + j);
    }
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void write(const std::string& journal, uint64_t version, const std::string& file,
             const std::string& bytes) {
    char step[32];
    std::snprintf(step, sizeof step, "v%020llu", static_cast<unsigned long long>(version));
    const auto dir = root_ / journal / step;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / file, std::ios::binary) << bytes;
  }
  json run(const std::string& journal, const std::string& mode,
           const std::vector<double>& publish) {
    json r = summarize_group_run(demo_report(mode, 400 * kMiB, publish), nullptr, {});
    r["journal_root"] = (root_ / journal).string();
    r["label"] = journal;
    return r;
  }

  std::filesystem::path root_;
};

TEST_F(JournalPair, IdenticalPartsPassAndRatiosAreMedians) {
  const json snapshot = run("snap", "snapshot", {900, 100, 100, 100});
  json hooked = run("hooked", "hooked", {90, 20, 10, 40});
  compare_publisher_modes(snapshot, &hooked, {});
  // Write / copy: 1.5, 4, 1.5 -> median 1.5; publish: 0.2, 0.1, 0.4 -> median 0.2.
  EXPECT_DOUBLE_EQ(hooked["modes"]["write_vs_copy_median"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(hooked["modes"]["publish_vs_snapshot_median"].get<double>(), 0.2);
  EXPECT_EQ(hooked["modes"]["compared_with"], "snap");
  EXPECT_EQ(hooked["modes"]["compared_versions"], json({1, 2, 3}));
  EXPECT_TRUE(hooked["modes"]["differing_versions"].empty());
  for (const char* name :
       {"hooked_write_vs_copy", "hooked_publish_vs_snapshot", "hooked_records_identical"}) {
    const json* t = find_target(hooked, name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ((*t)["pass"], true) << t->dump();
  }
}

TEST_F(JournalPair, OneByteDifferenceAndMissingStepsAreCaught) {
  write("hooked", 2, "part-00000.wcd", "records of v3");                  // same size, one byte off
  std::filesystem::remove_all(root_ / "snap" / "v00000000000000000003");  // retention took it
  EXPECT_EQ(same_delta_step((root_ / "snap").string(), (root_ / "hooked").string(), 1), 1);
  EXPECT_EQ(same_delta_step((root_ / "snap").string(), (root_ / "hooked").string(), 2), 0);
  EXPECT_EQ(same_delta_step((root_ / "snap").string(), (root_ / "hooked").string(), 3), -1);
  // A step with a file the other lacks differs too.
  write("hooked", 1, "part-00001.wcd", "more");
  EXPECT_EQ(same_delta_step((root_ / "snap").string(), (root_ / "hooked").string(), 1), 0);

  const json snapshot = run("snap", "snapshot", {900, 100, 100, 100});
  json hooked = run("hooked", "hooked", {90, 50, 60, 70});
  compare_publisher_modes(snapshot, &hooked, {});
  EXPECT_EQ(hooked["modes"]["compared_versions"], json({1, 2}));
  EXPECT_EQ(hooked["modes"]["differing_versions"], json({1, 2}));
  const json* t = find_target(hooked, "hooked_records_identical");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ((*t)["measured"], 2.0);
  EXPECT_EQ((*t)["pass"], false);
  t = find_target(hooked, "hooked_publish_vs_snapshot");  // 0.5, 0.6, 0.7 over 0.25
  ASSERT_NE(t, nullptr);
  EXPECT_DOUBLE_EQ((*t)["measured"].get<double>(), 0.6);
  EXPECT_EQ((*t)["pass"], false);
}

}  // namespace
}  // namespace weightcast
