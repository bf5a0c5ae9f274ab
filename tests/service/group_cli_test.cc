// `weightcast keys`, `group init|ranks|status` and `bench journal|coalesce` as a user runs
// them, beyond --help: what each writes or prints, and the errors that name what is wrong.
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/service/run_command.h"

namespace weightcast::testing {
namespace {

class GroupCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-group-cli-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static unsigned mode_of(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
  }
  // The JSON object a command printed (run_command merges stdout and stderr, so progress lines
  // may stand before or after it): from its opening line "{" to its closing line "}".
  static std::string last_json(const std::string& output) {
    const size_t open = output.rfind("{\n", 0) == 0 ? 0 : output.find("\n{\n");
    const size_t close = output.rfind("\n}");
    if (open == std::string::npos || close == std::string::npos || close < open) return output;
    const size_t from = open == 0 ? 0 : open + 1;
    return output.substr(from, close + 2 - from);
  }
  static std::string read(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

  std::string dir_;
};

TEST_F(GroupCli, InitWritesKeysAndAConfigThatRanksLists) {
  auto init = run_cli("group init --dir " + dir_ + "/g --subscribers 3 --demo-parameters 100000");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  const std::string config = dir_ + "/g/group.yaml";
  auto ranks = run_cli("group ranks --config " + config + " 2>/dev/null");
  ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
  EXPECT_EQ(ranks.output,
            "0 coordinator 127.0.0.1\n1 publisher 127.0.0.1\n2 subscriber 127.0.0.1\n"
            "3 subscriber 127.0.0.1\n4 subscriber 127.0.0.1\n");
  auto ids = run_cli("group ranks --config " + config + " --ids 2>/dev/null");
  EXPECT_EQ(ids.output, "0 1 2 3 4\n");
  // One secret per rank and one for observers, readable by their owner only.
  for (const char* key : {"rank0", "rank1", "rank4", "observer"}) {
    const std::string path = dir_ + "/g/keys/" + key + ".key";
    EXPECT_EQ(mode_of(path), 0600u) << path;
    EXPECT_NE(read(path).find("secret-key = "), std::string::npos) << path;
  }
  // Run again: refused without --force, and the keys stay as they were.
  const std::string before = read(dir_ + "/g/keys/rank1.key");
  auto again = run_cli("group init --dir " + dir_ + "/g --subscribers 3");
  EXPECT_NE(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("group.yaml"), std::string::npos) << again.output;
  EXPECT_EQ(read(dir_ + "/g/keys/rank1.key"), before);
}

TEST_F(GroupCli, InitWithTensorParallelPlacesTheSubscribersInReplicas) {
  auto init = run_cli("group init --dir " + dir_ + "/g --subscribers 4 --tensor-parallel 2");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  const std::string config = read(dir_ + "/g/group.yaml");
  EXPECT_NE(config.find("layouts:\n  - name: tp2\n    parts: 2\n"), std::string::npos) << config;
  EXPECT_NE(config.find("{match: '.*\\.(o|down)_proj\\.weight', dim: 1}"), std::string::npos)
      << config;
  EXPECT_NE(config.find("rank: 5, role: subscriber, host: 127.0.0.1, layout: tp2, part: 1, "
                        "replica: engine1"),
            std::string::npos)
      << config;
  auto ranks = run_cli("group ranks --config " + dir_ + "/g/group.yaml --ids 2>/dev/null");
  EXPECT_EQ(ranks.output, "0 1 2 3 4 5\n");  // the config it wrote loads
  // Subscribers that are not whole replicas: a bad command line, nothing written.
  auto odd = run_cli("group init --dir " + dir_ + "/h --subscribers 3 --tensor-parallel 2");
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_NE(odd.output.find("3 subscribers are not whole replicas of tensor parallel size 2"),
            std::string::npos)
      << odd.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/h/group.yaml"));
}

TEST_F(GroupCli, InitWithWholeSubscribersAndSeveralPublishers) {
  auto init =
      run_cli("group init --dir " + dir_ +
              "/g --publishers 4 --subscribers 3 --tensor-parallel 2 --whole-subscribers 1");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  const std::string config = read(dir_ + "/g/group.yaml");
  EXPECT_NE(config.find("{rank: 4, role: publisher, host: 127.0.0.1"), std::string::npos) << config;
  EXPECT_NE(config.find("rank: 6, role: subscriber, host: 127.0.0.1, layout: tp2, part: 1, "
                        "replica: engine0"),
            std::string::npos)
      << config;
  // The last subscriber holds whole tensors: no layout on its line.
  const size_t last = config.find("{rank: 7, role: subscriber, host: 127.0.0.1");
  ASSERT_NE(last, std::string::npos) << config;
  EXPECT_EQ(config.substr(last, config.find('\n', last) - last).find("layout"), std::string::npos)
      << config;
  auto more = run_cli("group init --dir " + dir_ +
                      "/h --subscribers 2 --tensor-parallel 2 --whole-subscribers 3");
  EXPECT_EQ(more.exit_code, 2) << more.output;
  EXPECT_NE(more.output.find("3 whole-tensor subscribers of only 2 subscribers"), std::string::npos)
      << more.output;
  auto odd = run_cli("group init --dir " + dir_ +
                     "/h --subscribers 4 --tensor-parallel 2 --whole-subscribers 1");
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_NE(odd.output.find("3 subscribers are not whole replicas"), std::string::npos)
      << odd.output;
}

TEST_F(GroupCli, KeysWritesAPairOnceAndRefusesToReplaceIt) {
  const std::string path = dir_ + "/k.key";
  auto keys = run_cli("keys --out " + path);
  ASSERT_EQ(keys.exit_code, 0) << keys.output;
  EXPECT_EQ(mode_of(path), 0600u);
  const std::string text = read(path);
  const size_t pub = text.find("public-key = ");
  const size_t sec = text.find("secret-key = ");
  ASSERT_NE(pub, std::string::npos);
  ASSERT_NE(sec, std::string::npos);
  EXPECT_EQ(text.substr(pub + 13, text.find('\n', pub) - pub - 13).size(), 40u);  // Z85
  EXPECT_NE(keys.output.find(text.substr(pub + 13, 40)), std::string::npos)
      << "the public key is printed: " << keys.output;
  auto again = run_cli("keys --out " + path);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("already exists"), std::string::npos) << again.output;
  EXPECT_EQ(read(path), text);
}

TEST_F(GroupCli, StatusNamesTheEndpointWhenNoCoordinatorAnswersAndReportsOneThatDoes) {
  ASSERT_EQ(run_cli("group init --dir " + dir_ + "/g --subscribers 1").exit_code, 0);
  const std::string config = dir_ + "/g/group.yaml";
  auto none = run_cli("group status --config " + config + " --timeout-ms 300");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("no answer from the coordinator at tcp://127.0.0.1:"),
            std::string::npos)
      << none.output;
  // A coordinator in the background for the length of one status request (bounded by
  // `timeout`), stopped with SIGTERM.
  auto with =
      run_command("timeout 20 " + std::string(WEIGHTCASTD_PATH) + " --config " + config +
                  " --rank 0 >" + dir_ + "/coordinator.log 2>&1 & pid=$!; " + WEIGHTCAST_CLI_PATH +
                  " group status --config " + config + " --json --timeout-ms 10000 >" + dir_ +
                  "/status.json; rc=$?; kill $pid; wait $pid; exit $rc");
  ASSERT_EQ(with.exit_code, 0) << with.output << read(dir_ + "/coordinator.log");
  auto j = nlohmann::json::parse(read(dir_ + "/status.json"));
  EXPECT_EQ(j["group_id"], "local");
  EXPECT_TRUE(j["members"].empty()) << "no rank but the coordinator runs";
}

TEST_F(GroupCli, BenchJournalAndCoalesceMeasureASmallModel) {
  const std::string scratch = dir_ + "/scratch";
  std::filesystem::create_directory(scratch);
  auto journal = run_cli("bench journal --dir " + scratch +
                         " --parameters 1000000 --tensors 4 --deltas 2 --anchor-bench-bytes 0 "
                         "--json");
  ASSERT_EQ(journal.exit_code, 0) << journal.output;
  const std::string journal_json = last_json(journal.output);
  ASSERT_TRUE(nlohmann::json::accept(journal_json)) << journal.output;
  auto j = nlohmann::json::parse(journal_json);
  EXPECT_EQ(j["model_bytes"], 2000000);
  EXPECT_EQ(j["catch_up_deltas"], 2);
  EXPECT_GT(j["delta_bytes_mean"].get<double>(), 0);
  EXPECT_LT(j["delta_bytes_mean"].get<double>(), 2000000 * 0.1) << "1 % of a model, sparse";
  EXPECT_NEAR(j["density_measured"].get<double>(), 0.01, 0.002);
  EXPECT_TRUE(std::filesystem::is_empty(scratch)) << "the scratch journal is removed";

  auto coalesce = run_cli("bench coalesce --experts 4 --repetitions 1");
  ASSERT_EQ(coalesce.exit_code, 0) << coalesce.output;
  const std::string coalesce_json = last_json(coalesce.output);
  ASSERT_TRUE(nlohmann::json::accept(coalesce_json)) << coalesce.output;
  auto c = nlohmann::json::parse(coalesce_json);
  EXPECT_GT(c["bytes"].get<double>(), 0);
  EXPECT_GT(c["coalesced_s"].get<double>(), 0);
  EXPECT_LE(c["coalesced_calls"].get<int>(), c["per_slice_calls"].get<int>());
}

}  // namespace
}  // namespace weightcast::testing
