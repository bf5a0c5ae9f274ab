// `weightcast journal ...` as a user runs it: help, a publish/inspect/verify/materialize/gc
// cycle on files written by our own safetensors writer, and the errors a user meets.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/base/file_io.h"
#include "src/model_files.h"
#include "tests/service/journal_cli_fixture.h"
#include "tests/service/run_command.h"

namespace weightcast {
namespace {

using testing::run_cli;

// The scratch directory and model files of every journal CLI suite.
class JournalCli : public testing::JournalCliFixture {};

TEST_F(JournalCli, EveryCommandHasHelp) {
  for (const char* cmd : {"journal", "journal publish", "journal inspect", "journal verify",
                          "journal materialize", "journal gc", "bench journal"}) {
    auto r = run_cli(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << cmd << "\n" << r.output;
  }
}

TEST_F(JournalCli, PublishInspectVerifyMaterializeGc) {
  for (int v = 0; v <= 3; ++v) {
    auto r = run_cli("journal publish --root " + root() + " --version " + std::to_string(v) +
                     " --from " + write_model(v, v * 3) + " --anchor-every 2 --keep-anchors 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(v % 2 == 0 ? "\"kind\":\"anchor\"" : "\"kind\":\"delta\""),
              std::string::npos)
        << r.output;
  }
  auto inspect = run_cli("journal inspect --root " + root());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  auto j = nlohmann::json::parse(inspect.output);
  EXPECT_EQ(j["head"]["version"], 3);
  EXPECT_EQ(j["head"]["anchor_version"], 2);
  // keep-anchors 1: versions 0 and 1 were collected after version 2's anchor.
  ASSERT_EQ(j["steps"].size(), 2u) << inspect.output;
  EXPECT_EQ(j["steps"][0]["version"], 2);

  auto step = run_cli("journal inspect --root " + root() + " --version 3 --tensors");
  ASSERT_EQ(step.exit_code, 0) << step.output;
  auto s = nlohmann::json::parse(step.output);
  EXPECT_EQ(s["kind"], "delta");
  EXPECT_EQ(s["changed_elements"], 3);  // 9 bumped against 6 before

  auto verify = run_cli("journal verify --root " + root());
  EXPECT_EQ(verify.exit_code, 0) << verify.output;

  const std::string out = dir_ + "/rebuilt.safetensors";
  auto mat = run_cli("journal materialize --root " + root() + " --out " + out);
  ASSERT_EQ(mat.exit_code, 0) << mat.output;
  auto rebuilt = read_whole_file(out);
  auto original = read_whole_file(dir_ + "/model-v3.safetensors");
  ASSERT_TRUE(rebuilt.ok() && original.ok());
  EXPECT_EQ(*rebuilt, *original);  // same writer, same tensors: byte-identical files

  auto gc = run_cli("journal gc --root " + root());
  EXPECT_EQ(gc.exit_code, 0) << gc.output;
}

// gc removes the steps before the newest --keep-anchors anchors and keeps every step a reader
// needs from the oldest kept anchor on: the journal still verifies and rebuilds the head.
TEST_F(JournalCli, GcRemovesTheStepsBeforeTheKeptAnchorsAndKeepsTheRest) {
  for (int v = 0; v <= 5; ++v) {
    ASSERT_EQ(run_cli("journal publish --root " + root() + " --version " + std::to_string(v) +
                      " --from " + write_model(v, v * 3) + " --anchor-every 2 --keep-anchors 10")
                  .exit_code,
              0);
  }
  const auto versions = [&] {
    auto inspect = run_cli("journal inspect --root " + root());
    const auto j = nlohmann::json::parse(inspect.output);  // named: the loop reads into it
    std::vector<int> out;
    for (const auto& step : j["steps"]) {
      out.push_back(step["version"].get<int>());
    }
    return out;
  };
  ASSERT_EQ(versions(), (std::vector<int>{0, 1, 2, 3, 4, 5}));  // nothing collected yet
  auto gc = run_cli("journal gc --root " + root() + " --keep-anchors 2");
  ASSERT_EQ(gc.exit_code, 0) << gc.output;
  EXPECT_EQ(versions(), (std::vector<int>{2, 3, 4, 5})) << gc.output;  // anchors 2 and 4 kept
  gc = run_cli("journal gc --root " + root() + " --keep-anchors 1");
  ASSERT_EQ(gc.exit_code, 0) << gc.output;
  EXPECT_EQ(versions(), (std::vector<int>{4, 5})) << gc.output;
  EXPECT_EQ(run_cli("journal verify --root " + root()).exit_code, 0);
  const std::string out = dir_ + "/head.safetensors";
  ASSERT_EQ(run_cli("journal materialize --root " + root() + " --out " + out).exit_code, 0);
  auto rebuilt = read_whole_file(out);
  auto original = read_whole_file(dir_ + "/model-v5.safetensors");
  ASSERT_TRUE(rebuilt.ok() && original.ok());
  EXPECT_EQ(*rebuilt, *original);
}

TEST_F(JournalCli, VerifyReportsACorruptPartAndFails) {
  for (int v = 0; v <= 1; ++v) {
    ASSERT_EQ(run_cli("journal publish --root " + root() + " --version " + std::to_string(v) +
                      " --from " + write_model(v, 5 * v))
                  .exit_code,
              0);
  }
  const std::string part = root() + "/v00000000000000000001/part-00000.wcd";
  {
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x7f');
  }
  auto verify = run_cli("journal verify --root " + root());
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find("part-00000.wcd"), std::string::npos) << verify.output;
}

TEST_F(JournalCli, ErrorsNameTheCulprit) {
  auto none = run_cli("journal materialize --root " + dir_ + " --out " + dir_ + "/x.safetensors");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.output.find("no HEAD"), std::string::npos) << none.output;

  ASSERT_EQ(run_cli("journal publish --root " + root() + " --version 5 --from " + write_model(0, 0))
                .exit_code,
            0);
  auto older =
      run_cli("journal publish --root " + root() + " --version 4 --from " + write_model(1, 1));
  EXPECT_EQ(older.exit_code, 1);
  EXPECT_NE(older.output.find("not newer than 5"), std::string::npos) << older.output;

  const std::string bad = dir_ + "/bad.safetensors";
  std::ofstream(bad) << "not a safetensors file";
  auto r = run_cli("journal publish --root " + root() + " --version 6 --from " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad.safetensors"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace weightcast
