// Every numeric flag of weightcast, weightcastd and weightcast_demo as a user types it: -1, a
// value past the flag's maximum (or below its minimum) and a word are refused with a nonzero
// exit and a message naming the flag and the value; a value at the bound is not refused.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/model_files.h"
#include "tests/service/run_command.h"
#include "weightcast/config.h"

namespace weightcast {
namespace {

using testing::run_cli;
using testing::run_command;

struct FlagCase {
  std::string command;  // program arguments before the flag, with {F} a file and {D} a directory
  std::string flag;
  std::vector<std::string> refused;  // besides "-1" (where 0 is allowed too) and "abc"
  std::string accepted;              // a bound; empty where running the command is not cheap
};

// Required arguments are present, so only the flag under test can fail the command line.
std::vector<FlagCase> weightcast_flags() {
  const std::string enc = "delta encode --old {F} --new {F} -o {D}/out.wcd";
  const std::string apply = "delta apply --delta {F} --target {F}";
  const std::string publish = "journal publish --root {D}/j --from {F}";
  const std::string init = "group init --dir {D}/g";
  std::vector<FlagCase> cases = {
      {enc, "--base-version", {"9223372036854775808"}, ""},
      {enc, "--version", {"9223372036854775808", "18446744073709551615"}, ""},
      {enc, "--chunk-elements", {"63", "1048577"}, ""},
      {enc, "--threads", {"0", "1025"}, ""},
      {apply, "--threads", {"0", "1025"}, ""},
      {"adapter publish --from {F} --config {F} --out {D}/a", "--threads", {"0", "1025"}, ""},
      {publish, "--version", {"9223372036854775808", "18446744073709551615"}, ""},
      {publish + " --version 1", "--anchor-every", {"4294967296"}, ""},
      {publish + " --version 1", "--keep-anchors", {"0", "4097"}, ""},
      {publish + " --version 1", "--part-bytes", {"4095", "4294967297"}, ""},
      {publish + " --version 1", "--shard-bytes", {"4095", "1099511627777"}, ""},
      {publish + " --version 1", "--threads", {"0", "1025"}, ""},
      {"journal inspect --root {D}", "--version", {"9223372036854775808"}, "9223372036854775807"},
      {"journal verify --root {D}", "--threads", {"0", "1025"}, "1"},
      {"journal materialize --root {D} --out {D}/m.safetensors",
       "--version",
       {"9223372036854775808"},
       "9223372036854775807"},
      {"journal materialize --root {D} --out {D}/m.safetensors", "--threads", {"0", "1025"}, "1"},
      {"journal gc --root {D}", "--keep-anchors", {"0", "4097"}, "4096"},
      {"journal repair-head --root {D}", "--threads", {"0", "1025"}, ""},
      {init, "--publishers", {"0", "4096"}, ""},
      {init, "--subscribers", {"4095"}, ""},
      {init, "--anchor-every", {"4294967296"}, ""},
      {init, "--max-in-flight", {"0", "1025"}, ""},
      {init, "--demo-parameters", {"1023", "34359738369", "2000000000000"}, ""},
      {init, "--demo-versions", {"0", "1000000001"}, ""},
      {"group status --config {F}", "--timeout-ms", {"0", "86400001"}, ""},
      {"bench delta", "--density", {"0", "0.95", "nan"}, ""},
      {"bench delta", "--elements", {"0", "4294967297"}, ""},
      {"bench delta", "--threads", {"0", "1025"}, ""},
      {"bench delta", "--chunk-elements", {"63", "1048577"}, ""},
      {"bench delta", "--repetitions", {"0", "101"}, ""},
      {"bench delta", "--seed", {"18446744073709551616"}, ""},
      {"bench adapter", "--repetitions", {"0", "101"}, ""},
      {"bench adapter", "--threads", {"0", "1025"}, ""},
      {"bench adapter", "--glm-hidden", {"15", "8193"}, ""},
      {"bench coalesce", "--experts", {"3", "4097"}, ""},
      {"bench coalesce", "--repetitions", {"0", "101"}, ""},
      {"bench coalesce", "--threads", {"0", "1025"}, ""},
      {"bench journal", "--parameters", {"0", "34359738369"}, ""},
      {"bench journal", "--tensors", {"0", "1048577"}, ""},
      {"bench journal", "--density", {"0", "0.95"}, ""},
      {"bench journal", "--deltas", {"10001"}, ""},
      {"bench journal", "--threads", {"0", "1025"}, ""},
      {"bench journal", "--anchor-bench-bytes", {"1099511627777"}, ""},
      {"bench journal", "--repetitions", {"0", "101"}, ""},
      {"bench model-delta", "--scale", {"0", "16.5", "inf"}, ""},
      {"bench model-delta", "--density", {"0", "0.95"}, ""},
      {"bench model-delta", "--threads", {"0", "1025"}, ""},
      {"bench model-delta", "--seed", {"18446744073709551616"}, ""},
      {"bench model-delta", "--verify-every", {"0", "1099511627777"}, ""},
      {"bench group", "--parameters", {"0", "1023", "34359738369"}, ""},
      {"bench group", "--density", {"0", "0.6", "nan"}, ""},
      {"bench group", "--versions", {"0", "1000000001"}, ""},
      {"bench group", "--subscribers", {"0", "257"}, ""},
      {"bench group", "--threads", {"1025"}, ""},
      {"bench group", "--timeout-s", {"0", "86401"}, ""},
      {"bench group", "--bound-factor", {"0.5", "1001", "inf"}, ""},
  };
#if WEIGHTCAST_HAVE_UCX
  for (FlagCase c : std::vector<FlagCase>{
           {"bench ucx", "--sizes", {"0", "17179869185"}, ""},
           {"bench ucx", "--iterations", {"1000000001"}, ""},
           {"bench ucx", "--repetitions", {"0", "101"}, ""},
           {"bench ucx", "--chunk-bytes", {"1073741825"}, ""},
           {"bench ucx", "--max-in-flight", {"1025"}, ""},
           {"bench ucx", "--mapped-chunk-bytes", {"1073741825"}, ""},
       }) {
    cases.push_back(std::move(c));
  }
#endif
  return cases;
}

class CliNumberFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-number-flags-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    file_ = dir_ + "/file";
    std::ofstream(file_) << "x";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string expand(std::string s) const {
    for (size_t at; (at = s.find("{F}")) != std::string::npos;) s.replace(at, 3, file_);
    for (size_t at; (at = s.find("{D}")) != std::string::npos;) s.replace(at, 3, dir_);
    return s;
  }

  // Runs `program command flag value`; returns the failure to report, or "" when refused as
  // it should be.
  static std::string check_refused(const std::string& program, const std::string& command,
                                   const std::string& flag, const std::string& value) {
    const std::string line = program + " " + command + " " + flag + " '" + value + "'";
    auto r = run_command(line);
    if (r.exit_code == 0) return line + ": accepted\n" + r.output;
    if (r.output.find(flag) == std::string::npos ||
        r.output.find("'" + value + "' is not") == std::string::npos) {
      return line + ": the message names neither the flag nor the value\n" + r.output;
    }
    return "";
  }

  void check_flags(const std::string& program, const std::vector<FlagCase>& cases) {
    for (const auto& c : cases) {
      std::vector<std::string> refused = c.refused;
      refused.insert(refused.end(), {"-1", "abc"});
      for (const auto& v : refused) {
        const std::string failure = check_refused(program, expand(c.command), c.flag, v);
        EXPECT_TRUE(failure.empty()) << failure;
      }
      if (c.accepted.empty()) continue;
      // The command may still fail (an empty journal), but not because of the flag.
      auto r = run_command(program + " " + expand(c.command) + " " + c.flag + " " + c.accepted);
      EXPECT_EQ(r.output.find("' is not a"), std::string::npos)
          << c.command << " " << c.flag << " " << c.accepted << "\n"
          << r.output;
    }
  }

  std::string dir_, file_;
};

TEST_F(CliNumberFlags, WeightcastRefusesEveryOutOfRangeNumber) {
  check_flags(WEIGHTCAST_CLI_PATH, weightcast_flags());
  // A bad command line exits 2 (main.cc), a failed command 1, --help 0.
  for (const char* args : {" bench delta --no-such-flag", " no-such-command", "",
                           " journal publish --version x", " delta inspect /no/such/file"}) {
    auto r = run_command(std::string(WEIGHTCAST_CLI_PATH) + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  }
  EXPECT_EQ(run_command(std::string(WEIGHTCAST_CLI_PATH) + " bench delta --help").exit_code, 0);
  auto failed = run_command(std::string(WEIGHTCAST_CLI_PATH) + " delta inspect " + file_);
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
}

TEST_F(CliNumberFlags, WeightcastdRefusesEveryOutOfRangeNumber) {
  check_flags(WEIGHTCASTD_PATH,
              {{"--config {F} --rank 1", "--threads", {"1025"}, ""},
               {"--config {F} --rank 1", "--start-version", {"9223372036854775808"}, ""},
               {"--config {F}", "--rank", {"4294967296"}, ""}});
  // A bad command line exits 2 (weightcastd_main.cc), which a supervisor such as
  // deploy/systemd's unit does not restart; CLI11's own codes start at 105.
  for (const char* args : {" --rank x --config ", " --no-such-flag --config "}) {
    auto r = run_command(std::string(WEIGHTCASTD_PATH) + args + file_);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  }
}

TEST_F(CliNumberFlags, DemoRefusesEveryOutOfRangeNumber) {
  check_flags(WEIGHTCAST_DEMO_PATH, {{"", "--scale", {"0", "1.5"}, ""},
                                     {"", "--steps", {"0", "1001"}, ""},
                                     {"", "--density", {"0", "0.95"}, ""},
                                     {"", "--threads", {"0", "1025"}, ""}});
}

TEST_F(CliNumberFlags, GroupDemoRefusesEveryOutOfRangeNumber) {
  check_flags(WEIGHTCAST_GROUP_DEMO_PATH, {{"", "--parameters", {"1023", "34359738369"}, ""},
                                           {"", "--density", {"0", "0.51"}, ""},
                                           {"", "--versions", {"0", "1000000001"}, ""},
                                           {"", "--anchor-every", {"4294967296"}, ""},
                                           {"", "--subscribers", {"257"}, ""},
                                           {"", "--join-at", {"1000000001"}, ""},
                                           {"", "--kill-at", {"1000000001"}, ""},
                                           {"", "--step-interval-ms", {"60001"}, ""},
                                           {"", "--timeout-s", {"0", "86401"}, ""}});
}

// `journal publish --version -1` used to store version 2^64-1, after which no version could
// ever be published: it is refused and the journal is left as it was.
TEST_F(CliNumberFlags, PublishOfVersionMinusOneLeavesTheJournalUnchanged) {
  std::vector<uint8_t> weight(2 * 256, 1);
  const std::string model = dir_ + "/model.safetensors";
  const std::vector<TensorBytesView> tensors{{"w", DType::kBF16, {16, 16}, weight}};
  ASSERT_TRUE(write_model_file(model, tensors).ok());
  const std::string root = dir_ + "/journal";
  auto first = run_cli("journal publish --root " + root + " --version 1 --from " + model);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto listing = [&] {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root))
      files.push_back(e.path().string() + " " +
                      std::to_string(e.is_regular_file() ? e.file_size() : 0));
    std::sort(files.begin(), files.end());
    return files;
  };
  const auto before = listing();
  const auto head_before = run_cli("journal inspect --root " + root);

  auto r = run_cli("journal publish --root " + root + " --version -1 --from " + model);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--version"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'-1'"), std::string::npos) << r.output;
  EXPECT_EQ(listing(), before);
  EXPECT_EQ(run_cli("journal inspect --root " + root).output, head_before.output);

  auto next = run_cli("journal publish --root " + root + " --version 2 --from " + model);
  EXPECT_EQ(next.exit_code, 0) << next.output;
}

std::string demo_config(const std::string& dir, const std::string& parameters) {
  const std::string config = dir + "/group.yaml";
  std::ofstream(config) << "group_id: demo\n"
                           "coordinator: {endpoint: \"tcp://127.0.0.1:1\"}\n"
                           "journal: {root: journal}\n"
                           "ranks:\n"
                           "  - {rank: 0, role: coordinator}\n"
                           "  - {rank: 1, role: publisher}\n"
                           "demo: {parameters: "
                        << parameters << "}\n";
  return config;
}

// A config asking for two trillion demo parameters: weightcastd refuses it at load, naming
// the field, instead of dying of std::bad_alloc in the publisher.
TEST_F(CliNumberFlags, WeightcastdRefusesATwoTrillionParameterDemo) {
  auto r = run_command("timeout 60 " + std::string(WEIGHTCASTD_PATH) + " --config " +
                       demo_config(dir_, "2000000000000") + " --rank 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("demo.parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2000000000000"), std::string::npos) << r.output;
}

// The largest demo a config may ask for (the full Qwen3-30B-A3B shapes, 6 bytes a parameter)
// on a host with less RAM: the publisher exits 1 with a Status naming the allocation, before
// joining the group, rather than aborting or being OOM-killed.
TEST_F(CliNumberFlags, WeightcastdReportsADemoModelLargerThanTheHost) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  meminfo >> key >> kib;
  ASSERT_EQ(key, "MemTotal:");
  if (kib * 1024 > (uint64_t{160} << 30)) GTEST_SKIP() << "this host could hold the model";
  auto r = run_command("timeout 60 " + std::string(WEIGHTCASTD_PATH) + " --config " +
                       demo_config(dir_, "34359738368") + " --rank 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot allocate"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the demo model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace weightcast
