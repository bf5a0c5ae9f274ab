// The weightcast command line, run as a user would: raw files in a temp directory.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "tests/service/run_command.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

using CliRun = weightcast::testing::CommandResult;

CliRun run(const std::string& args) {
  return weightcast::testing::run_cli(args);
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weightcast_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::mt19937 rng(5);
    old_.resize(100000 * 2);
    for (auto& b : old_) b = static_cast<uint8_t>(rng());
    new_ = old_;
    for (size_t i = 0; i < new_.size(); i += 2 * 97) new_[i] += 1;
    write_file(dir_ / "old.bin", old_);
    write_file(dir_ / "new.bin", new_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const char* name) const { return (dir_ / name).string(); }

  fs::path dir_;
  std::vector<uint8_t> old_, new_;
};

TEST_F(CliTest, EncodeApplyInspectRoundTrip) {
  CliRun enc = run("delta encode --dtype bf16 --old " + p("old.bin") + " --new " + p("new.bin") +
                   " -o " + p("d.wcd") + " --version 7 --base-version 6");
  ASSERT_EQ(enc.exit_code, 0) << enc.output;
  write_file(dir_ / "target.bin", old_);
  CliRun app =
      run("delta apply --dtype bf16 --delta " + p("d.wcd") + " --target " + p("target.bin"));
  ASSERT_EQ(app.exit_code, 0) << app.output;
  EXPECT_EQ(read_file(dir_ / "target.bin"), new_);

  CliRun ins = run("delta inspect --json " + p("d.wcd"));
  ASSERT_EQ(ins.exit_code, 0) << ins.output;
  const auto j = nlohmann::json::parse(ins.output);
  ASSERT_EQ(j["records"].size(), 1u);
  const auto& r = j["records"][0];
  EXPECT_EQ(r["base_version"], 6);
  EXPECT_EQ(r["target_version"], 7);
  EXPECT_EQ(r["changed"], 1031);  // every 97th of 100000 elements
  EXPECT_EQ(r["base_checksum"].get<std::string>().size(), 16u);
  EXPECT_EQ(r["tensor"], "new");

  CliRun text = run("delta inspect --chunks " + p("d.wcd"));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("gaps-rice"), std::string::npos) << text.output;
}

TEST_F(CliTest, ApplyTwiceIsRefusedAndLeavesTheFile) {
  ASSERT_EQ(
      run("delta encode --old " + p("old.bin") + " --new " + p("new.bin") + " -o " + p("d.wcd"))
          .exit_code,
      0);
  write_file(dir_ / "target.bin", old_);
  ASSERT_EQ(run("delta apply --delta " + p("d.wcd") + " --target " + p("target.bin")).exit_code, 0);
  CliRun again = run("delta apply --delta " + p("d.wcd") + " --target " + p("target.bin"));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.output.find("refusing to apply"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("target.bin"), std::string::npos) << again.output;
  EXPECT_EQ(read_file(dir_ / "target.bin"), new_);
}

TEST_F(CliTest, CorruptDeltaFileIsRejectedByName) {
  ASSERT_EQ(
      run("delta encode --old " + p("old.bin") + " --new " + p("new.bin") + " -o " + p("d.wcd"))
          .exit_code,
      0);
  auto bytes = read_file(dir_ / "d.wcd");
  bytes[bytes.size() / 2] ^= 0x40;
  write_file(dir_ / "bad.wcd", bytes);
  write_file(dir_ / "target.bin", old_);
  CliRun r = run("delta apply --delta " + p("bad.wcd") + " --target " + p("target.bin"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad.wcd"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("XXH3"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir_ / "target.bin"), old_);
}

TEST_F(CliTest, MismatchedSizesAndDtypesAreClearErrors) {
  std::vector<uint8_t> odd(old_.begin(), old_.begin() + 1001);
  write_file(dir_ / "odd.bin", odd);
  CliRun r =
      run("delta encode --old " + p("odd.bin") + " --new " + p("odd.bin") + " -o " + p("d.wcd"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;
  ASSERT_EQ(
      run("delta encode --old " + p("old.bin") + " --new " + p("new.bin") + " -o " + p("d.wcd"))
          .exit_code,
      0);
  write_file(dir_ / "target.bin", old_);
  CliRun wrong =
      run("delta apply --dtype f16 --delta " + p("d.wcd") + " --target " + p("target.bin"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.output.find("--dtype"), std::string::npos) << wrong.output;
}

TEST(Cli, HelpAndVersion) {
  for (const char* args : {"--help", "delta --help", "delta encode --help", "delta apply --help",
                           "delta inspect --help", "bench delta --help", "version --help"}) {
    CliRun r = run(args);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << args;
  }
  CliRun v = run("version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.output.find("weightcast 0.1.0"), std::string::npos) << v.output;
}

TEST(Cli, BenchDeltaPrintsTheRequiredJson) {
  CliRun r = run("bench delta --density 0.01 --elements 1048576 --repetitions 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  for (const char* key : {"density", "changed", "encoded_bytes", "bits_per_change", "encode_s",
                          "apply_s", "memcmp_s", "encode_vs_memcmp", "apply_vs_memcmp"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GT(j["changed"].get<double>(), 1048576 * 0.005);
  EXPECT_LT(j["bits_per_change"].get<double>(), 16.0);
}

}  // namespace
