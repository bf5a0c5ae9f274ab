// Inputs without tensors are refused, naming the input, and leave nothing behind:
// `weightcast adapter publish` (safetensors and torch.save inputs, and publish_adapter itself)
// and `weightcast journal publish` (a fresh journal and one with a HEAD).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/formats/torch_artifact.h"
#include "src/adapter_publish.h"
#include "src/model_files.h"
#include "tests/service/run_command.h"
#include "tests/test_bytes.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

class EmptyInputCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-empty-input-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/adapter_config.json") << R"({"r": 8})";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string empty_safetensors() {
    const std::string path = dir_ + "/empty.safetensors";
    EXPECT_TRUE(write_model_file(path, {}).ok());
    return path;
  }
  std::string empty_torch_file() {
    testing::Bytes bytes;
    EXPECT_TRUE(write_torch_artifact("archive", {}, {}, testing::sink_into(&bytes)).ok());
    const std::string path = dir_ + "/empty.pt";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  std::string one_tensor_model() {
    static const std::vector<uint8_t> bytes(4 * 16, 7);
    const std::vector<TensorBytesView> tensors{{"w", DType::kF32, {16}, bytes}};
    const std::string path = dir_ + "/model.safetensors";
    EXPECT_TRUE(write_model_file(path, tensors).ok());
    return path;
  }
  std::string journal() const { return dir_ + "/journal"; }

  std::string dir_;
};

TEST_F(EmptyInputCli, AdapterPublishRefusesAnEmptySafetensorsFile) {
  const std::string in = empty_safetensors();
  const std::string out = dir_ + "/published";
  auto r = run_cli("adapter publish --from " + in + " --config " + dir_ +
                   "/adapter_config.json --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'" + in + "' has no tensors: nothing to publish"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out)) << "a refused publication created " << out;
}

TEST_F(EmptyInputCli, AdapterPublishRefusesAnEmptyTorchFile) {
  const std::string in = empty_torch_file();
  const std::string out = dir_ + "/published";
  auto r = run_cli("adapter publish --from " + in + " --config " + dir_ +
                   "/adapter_config.json --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'" + in + "' has no tensors: nothing to publish"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(EmptyInputCli, PublishAdapterRefusesNoTensorsBeforeWriting) {
  const std::string out = dir_ + "/published";
  auto pub = publish_adapter(out, {}, "{}");
  ASSERT_FALSE(pub.ok());
  EXPECT_EQ(pub.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pub.status().message().find("'" + out + "' has no tensors"), std::string::npos)
      << pub.status().to_string();
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(EmptyInputCli, JournalPublishRefusesAnEmptyModelOnAFreshJournal) {
  const std::string in = empty_safetensors();
  auto r = run_cli("journal publish --root " + journal() + " --version 1 --from " + in);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'" + in + "' has no tensors: nothing to publish"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(journal())) << "a refused publication created the journal";
}

TEST_F(EmptyInputCli, JournalPublishRefusesAnEmptyModelAndKeepsTheHead) {
  auto first =
      run_cli("journal publish --root " + journal() + " --version 1 --from " + one_tensor_model());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string in = empty_safetensors();
  auto r = run_cli("journal publish --root " + journal() + " --version 2 --from " + in);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("'" + in + "' has no tensors: nothing to publish"), std::string::npos)
      << r.output;

  auto inspect = run_cli("journal inspect --root " + journal());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  const auto j = nlohmann::json::parse(inspect.output);
  EXPECT_EQ(j["head"]["version"], 1);
  ASSERT_EQ(j["steps"].size(), 1u) << inspect.output;
  EXPECT_EQ(j["steps"][0]["version"], 1);
}

}  // namespace
}  // namespace weightcast
