// `weightcast adapter publish|inspect|verify` and `bench adapter`, run as a user would.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/workload/adapter_fixtures.h"
#include "src/adapter_publish.h"
#include "tests/service/run_command.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;

std::pair<int, std::string> run(const std::string& args) {
  auto r = testing::run_cli(args);
  return {r.exit_code, r.output};
}

class AdapterCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weightcast_adapter_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    GlmAdapterOptions o;
    o.layers = 2;
    o.experts = 8;
    o.hidden = 64;
    o.moe_intermediate = 32;
    o.rank = 8;
    const AdapterFixture f = make_glm_shared_expert_adapter(o);
    // The input: every key as its own safetensors tensor (what a naive export writes).
    ASSERT_TRUE(write_safetensors_file((dir_ / "export.safetensors").string(), f.tensors).ok());
    std::ofstream(dir_ / "adapter_config.json") << f.adapter_config_json;
    keys_ = f.tensors.size();
    storages_ = f.storages.size();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const char* name) const { return (dir_ / name).string(); }

  fs::path dir_;
  size_t keys_ = 0, storages_ = 0;
};

TEST_F(AdapterCliTest, PublishInspectVerify) {
  auto [rc, out] = run("adapter publish --from " + p("export.safetensors") + " --config " +
                       p("adapter_config.json") + " --out " + p("published"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("torch-compact"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_ / "published" / kAdapterBinFile));

  auto [irc, json] = run("adapter inspect --json " + p("published"));
  ASSERT_EQ(irc, 0) << json;
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["representation"], "torch-compact");
  EXPECT_EQ(j["keys"], keys_);
  EXPECT_EQ(j["file_storages"], storages_);
  EXPECT_EQ(j["unique_storages"], storages_);
  EXPECT_LT(j["unique_bytes"].get<uint64_t>() * 2, j["logical_bytes"].get<uint64_t>());

  auto [src, text] = run("adapter inspect " + p("export.safetensors"));
  ASSERT_EQ(src, 0) << text;
  EXPECT_NE(text.find("the rule picks   torch-compact"), std::string::npos) << text;

  auto [vrc, verify] = run("adapter verify " + p("published"));
  EXPECT_EQ(vrc, 0) << verify;
  EXPECT_NE(verify.find("OK"), std::string::npos) << verify;
}

TEST_F(AdapterCliTest, VerifyFailsOnACorruptArtifact) {
  ASSERT_EQ(run("adapter publish --from " + p("export.safetensors") + " --config " +
                p("adapter_config.json") + " --out " + p("published"))
                .first,
            0);
  const fs::path bin = dir_ / "published" / kAdapterBinFile;
  std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(fs::file_size(bin) / 2));
  f.put('\x5A');
  f.close();
  auto [rc, out] = run("adapter verify " + p("published"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find(kAdapterBinFile), std::string::npos) << out;
}

TEST_F(AdapterCliTest, HelpOnEveryAdapterCommand) {
  for (const char* args : {"adapter --help", "adapter publish --help", "adapter inspect --help",
                           "adapter verify --help", "bench adapter --help"}) {
    auto [rc, out] = run(args);
    EXPECT_EQ(rc, 0) << args;
    EXPECT_NE(out.find("Usage"), std::string::npos) << args;
  }
}

}  // namespace
}  // namespace weightcast
