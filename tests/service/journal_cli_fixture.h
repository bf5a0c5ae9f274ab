// A scratch directory with small model files for the `weightcast journal` CLI suites.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "src/model_files.h"

namespace weightcast::testing {

class JournalCliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-journal-cli-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A model file whose bf16 weight has `bumped` elements raised by one ULP.
  std::string write_model(int version, int bumped) {
    std::vector<uint8_t> weight(2 * 4096), norm(4 * 64);
    for (size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<uint8_t>(i * 7 + 3);
    for (size_t i = 0; i < norm.size(); ++i) norm[i] = static_cast<uint8_t>(i);
    for (int k = 0; k < bumped; ++k) weight[static_cast<size_t>(k) * 64] += 1;
    const std::vector<TensorBytesView> tensors{{"w", DType::kBF16, {64, 64}, weight},
                                               {"norm", DType::kF32, {64}, norm}};
    const std::string path = dir_ + "/model-v" + std::to_string(version) + ".safetensors";
    EXPECT_TRUE(write_model_file(path, tensors).ok());
    return path;
  }

  std::string root() const { return dir_ + "/journal"; }
  std::string dir_;
};

}  // namespace weightcast::testing
