// `weightcast bench group` as a user runs it: help, a small rank group whose JSON holds every
// figure the command promises (docs/PERFORMANCE.md, "Rank group bench"), the in-process
// reference regenerating the very deltas the group published, and an exit status that depends
// on the targets only with --check.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <map>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/service/run_command.h"

namespace weightcast {
namespace {

using testing::run_cli;

// The JSON object the run printed on stdout (progress lines on stderr come first).
nlohmann::json parse_json(const std::string& output) {
  size_t from = output.rfind("\n{\n");  // nested objects are indented: this is the outer one
  if (from != std::string::npos) {
    ++from;
  } else if (output.rfind("{\n", 0) == 0) {
    from = 0;
  } else {
    return nlohmann::json();
  }
  return nlohmann::json::parse(output.substr(from), nullptr, /*allow_exceptions=*/false);
}

std::string work_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("weightcast-bench-group-test-" + name + "-" + std::to_string(::getpid()));
  return dir.string();
}

TEST(GroupBenchCli, HasHelp) {
  auto r = run_cli("bench group --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* option : {"Usage", "--parameters", "--density", "--versions", "--subscribers",
                             "--transports", "--work-dir", "--json", "--check", "--check-targets",
                             "--bound-factor", "--publisher-mode", "hooked", "268435456"}) {
    EXPECT_NE(r.output.find(option), std::string::npos) << option << "\n" << r.output;
  }
}

TEST(GroupBenchCli, SmallGroupReportsEveryFigure) {
  const std::string dir = work_dir("small");
  auto r = run_cli(
      "bench group --parameters 2000000 --versions 4 --transports fs --json "
      "--work-dir " +
      dir);
  // Whatever the targets say (at this size the latency ratio is far off), the runs succeeded.
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["parameters"], 2000000);
  EXPECT_EQ(j["subscribers"], 1);
  EXPECT_EQ(j["check"], false);
  ASSERT_EQ(j["runs"].size(), 1u);
  const nlohmann::json& run = j["runs"][0];
  EXPECT_EQ(run["transport"], "fs");

  // Ranks: the publisher and the subscriber, each with its peak RSS and own tensor bytes.
  ASSERT_EQ(run["ranks"].size(), 2u) << run.dump(2);
  for (const auto& rank : run["ranks"]) {
    EXPECT_GT(rank["peak_rss_bytes"].get<uint64_t>(), rank["own_bytes"].get<uint64_t>());
    EXPECT_EQ(rank["own_bytes"], run["ranks"][0]["own_bytes"]);  // a subscriber holds the model
    if (rank["role"] == "subscriber") {
      EXPECT_TRUE(rank.contains("peak_rss_minus_engine_bytes"));
    }
  }

  // Versions 0..4, the anchor first; every delta has its in-process reference, whose records
  // are the group's (one journal part: its 16-byte header besides the record bytes).
  ASSERT_EQ(run["versions"].size(), 5u) << run.dump(2);
  EXPECT_EQ(run["versions"][0]["kind"], "anchor");
  ASSERT_TRUE(j["codec"].is_object()) << j.dump(2);
  ASSERT_EQ(j["codec"]["versions"].size(), 4u);
  for (size_t i = 1; i < 5; ++i) {
    const auto& v = run["versions"][i];
    const auto& c = j["codec"]["versions"][i - 1];
    EXPECT_EQ(v["kind"], "delta");
    EXPECT_EQ(v["changed_elements"], c["changed_elements"]);
    EXPECT_EQ(v["stored_bytes"].get<uint64_t>(), c["record_bytes"].get<uint64_t>() + 16);
    EXPECT_GT(v["publish_to_all_acked_ms"].get<double>(), 0);
    EXPECT_GT(v["encode_apply_ms"].get<double>(), 0);
  }
  EXPECT_EQ(run["versions"].back()["acked_by_all"], true);  // the run ends with all at the head

  // The three targets, each measured / bound.
  for (const char* name : {"subscriber_rss", "bytes_written", "all_acked_vs_codec"}) {
    bool found = false;
    for (const auto& t : run["targets"]) found = found || t["target"] == name;
    EXPECT_TRUE(found) << name << "\n" << run["targets"].dump(2);
  }
  std::filesystem::remove_all(dir);
}

// Hooked mode at a small size: the snapshot run of the same transport is added, both runs
// publish the same versions, and their journals hold byte-identical delta parts.
// Tensor-parallel engines: each subscriber rank holds only its slices, so about half of the
// model, and every version is committed by both.
TEST(GroupBenchCli, TensorParallelSubscribersHoldAboutHalfTheModel) {
  const std::string dir = work_dir("tp2");
  auto r = run_cli(
      "bench group --parameters 4000000 --versions 4 --transports fs --subscribers 2 "
      "--tensor-parallel 2 --no-codec-reference --json --work-dir " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;
  const nlohmann::json& run = j["runs"][0];
  uint64_t model = 0;
  std::vector<uint64_t> engines;
  for (const auto& rank : run["ranks"]) {
    if (rank["role"] == "publisher") model = rank["own_bytes"].get<uint64_t>();
    if (rank["role"] == "subscriber") engines.push_back(rank["own_bytes"].get<uint64_t>());
  }
  ASSERT_EQ(engines.size(), 2u) << run.dump(2);
  for (const uint64_t e : engines) {
    EXPECT_GT(e, model * 4 / 10) << run.dump(2);
    EXPECT_LT(e, model * 6 / 10) << run.dump(2);
  }
  auto odd = run_cli("bench group --subscribers 3 --tensor-parallel 2 --work-dir " + dir);
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
}

// Several publisher ranks: the single-publisher run is added, each publisher rank reports its
// own shard (about a quarter of the model), both runs commit every version after the first to
// both layouts, and the delta versions both count (large enough a model that the engines are
// connected by then) are compared.
TEST(GroupBenchCli, PublisherRanksRunIsComparedWithTheSinglePublisher) {
  const std::string dir = work_dir("ranks");
  auto r = run_cli(
      "bench group --parameters 30000000 --versions 6 --transports fs --subscribers 3 "
      "--tensor-parallel 2 --whole-subscribers 1 --publisher-mode ranks --publisher-ranks 4 "
      "--no-codec-reference --json --work-dir " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["publisher_modes"], nlohmann::json({"snapshot", "ranks"}));
  const nlohmann::json& single = j["runs"][0];
  const nlohmann::json& ranks = j["runs"][1];
  EXPECT_EQ(ranks["label"], "fs-ranks");
  uint64_t model = 0;
  for (const auto& rank : single["ranks"]) {
    if (rank["role"] == "publisher") model = rank["own_bytes"].get<uint64_t>();
  }
  int publishers = 0;
  for (const auto& rank : ranks["ranks"]) {
    if (rank["role"] != "publisher") continue;
    ++publishers;
    EXPECT_EQ(rank["peak_rss_source"], "vm_hwm") << rank.dump();
    ASSERT_TRUE(rank["own_bytes"].is_number()) << rank.dump();
    EXPECT_LT(rank["own_bytes"].get<uint64_t>(), model * 3 / 10) << rank.dump();
  }
  EXPECT_EQ(publishers, 4);
  const nlohmann::json& sharded = ranks["sharded"];
  EXPECT_EQ(sharded["compared_with"], "fs");
  EXPECT_EQ(sharded["publishers"], 4);
  // The compared versions are the deltas both runs counted (on a loaded machine the engines may
  // join late, and fewer count); the ratio is the median of their per-version ratios.
  std::map<uint64_t, double> one, four;
  for (const auto& [run, ms] : {std::pair{&single, &one}, std::pair{&ranks, &four}}) {
    for (const auto& v : (*run)["versions"]) {
      if (v["kind"] == "delta" && v["counted"].get<bool>()) {
        (*ms)[v["version"].get<uint64_t>()] = v["publish_to_all_acked_ms"].get<double>();
      }
    }
  }
  std::vector<double> ratios;
  for (const auto& [version, ms] : four) {
    if (one.count(version)) ratios.push_back(ms / one[version]);
  }
  ASSERT_EQ(sharded["delta_versions"].size(), ratios.size()) << sharded.dump();
  if (ratios.empty()) {
    EXPECT_TRUE(sharded["delta_ratio"].is_null()) << sharded.dump();
  } else {
    std::sort(ratios.begin(), ratios.end());
    const size_t n = ratios.size();
    const double median = n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    EXPECT_NEAR(sharded["delta_ratio"].get<double>(), median, 1e-9) << sharded.dump();
  }
  // Every engine of both layouts acked the last version.
  EXPECT_TRUE(ranks["versions"].back()["acked_by_all"].get<bool>()) << ranks["versions"].dump();
}

TEST(GroupBenchCli, HookedRunPublishesTheSnapshotRunsRecords) {
  const std::string dir = work_dir("hooked");
  auto r = run_cli(
      "bench group --parameters 4000000 --versions 4 --transports fs --publisher-mode hooked "
      "--no-codec-reference --json --check --check-targets hooked_records_identical "
      "--work-dir " +
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = parse_json(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["publisher_modes"], nlohmann::json({"snapshot", "hooked"}));
  ASSERT_EQ(j["runs"].size(), 2u);
  const nlohmann::json& snapshot = j["runs"][0];
  const nlohmann::json& hooked = j["runs"][1];
  EXPECT_EQ(snapshot["label"], "fs");
  EXPECT_EQ(hooked["label"], "fs-hooked");
  EXPECT_EQ(hooked["publisher_mode"], "hooked");
  ASSERT_EQ(hooked["versions"].size(), 5u) << hooked.dump(2);
  for (size_t v = 1; v < 5; ++v) {
    // The same deltas: the same stored bytes, written in pieces, timed against a plain copy.
    EXPECT_EQ(hooked["versions"][v]["stored_bytes"], snapshot["versions"][v]["stored_bytes"]);
    EXPECT_GT(hooked["versions"][v]["write_ms"].get<double>(), 0);
    EXPECT_GT(hooked["versions"][v]["plain_copy_ms"].get<double>(), 0);
    EXPECT_GT(hooked["versions"][v]["publish_ms"].get<double>(), 0);
    EXPECT_GT(snapshot["versions"][v]["publish_ms"].get<double>(), 0);
  }
  // Every delta step compared, none differing.
  EXPECT_EQ(hooked["modes"]["compared_versions"], nlohmann::json({1, 2, 3, 4})) << hooked.dump(2);
  EXPECT_TRUE(hooked["modes"]["differing_versions"].empty());
  EXPECT_EQ(j["targets_pass"], true);
  // The publisher's memory is set against the trainer's own bytes in both runs.
  for (const auto& run : {snapshot, hooked}) {
    bool found = false;
    for (const auto& t : run["targets"]) found = found || t["target"] == "publisher_rss";
    EXPECT_TRUE(found) << run["targets"].dump(2);
    for (const auto& rank : run["ranks"]) {
      if (rank["role"] == "publisher") {
        EXPECT_TRUE(rank["trainer_bytes"].is_number());
      }
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(GroupBenchCli, CheckFailsOnATargetItCannotEvaluate) {
  const std::string dir = work_dir("check");
  // Without the reference the latency target is n/a: a failure under --check only.
  const std::string args =
      "bench group --parameters 2000000 --versions 1 --no-codec-reference "
      "--check-targets all_acked_vs_codec --work-dir " +
      dir;
  auto plain = run_cli(args);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_TRUE(testing::has(plain, "n/a")) << plain.output;
  auto checked = run_cli(args + " --check");
  EXPECT_EQ(checked.exit_code, 1) << checked.output;
  EXPECT_TRUE(testing::has(checked, "all_acked_vs_codec (fs): not evaluated")) << checked.output;
  std::filesystem::remove_all(dir);
}

TEST(GroupBenchCli, ReportsAFailedRun) {
  auto r = run_cli(
      "bench group --parameters 2000000 --versions 1 --demo /nonexistent/demo "
      "--work-dir " +
      work_dir("missing"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(testing::has(r, "/nonexistent/demo")) << r.output;
  std::filesystem::remove_all(work_dir("missing"));
}

}  // namespace
}  // namespace weightcast
