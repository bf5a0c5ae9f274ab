// `weightcast fp8 quantize` (src/fp8_export.h): the linear projections become float8_e4m3fn with
// a scale grid each, equal to the quantiser's output; other tensors are copied byte for byte;
// config.json gains the FP8 quantization_config beside the model's own keys; patterns that
// select nothing, are not regexes or select a tensor that is not a matrix are refused by name.
#include "src/fp8_export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "codec/base/file_io.h"
#include "codec/float_convert.h"
#include "codec/formats/safetensors_format.h"
#include "codec/fp8_quantize.h"
#include "src/model_files.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;

class Fp8Export : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("wc_fp8_export_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (auto* v : {&proj_, &embed_}) {
      for (auto& x : *v) x = float_to_bf16(normal(rng));
    }
    for (auto& x : norm_) x = float_to_bf16(1.0f);
    const std::vector<TensorBytesView> tensors{
        {"model.layers.0.self_attn.q_proj.weight", DType::kBF16, {200, 130}, bytes(proj_)},
        {"model.embed_tokens.weight", DType::kBF16, {50, 64}, bytes(embed_)},
        {"model.norm.weight", DType::kBF16, {64}, bytes(norm_)}};
    ASSERT_TRUE(write_model_file(model(), tensors).ok());
    std::ofstream(dir_ / "config.json") << R"({"model_type": "toy", "hidden_size": 64})";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::span<const uint8_t> bytes(const std::vector<uint16_t>& v) {
    return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 2};
  }
  std::string model() const { return (dir_ / "model.safetensors").string(); }
  std::string out() const { return (dir_ / "fp8").string(); }

  fs::path dir_;
  std::vector<uint16_t> proj_ = std::vector<uint16_t>(200 * 130);
  std::vector<uint16_t> embed_ = std::vector<uint16_t>(50 * 64);
  std::vector<uint16_t> norm_ = std::vector<uint16_t>(64);
};

TEST_F(Fp8Export, QuantisesTheProjectionsAndKeepsTheRest) {
  Fp8ExportOptions o{model(), out(), {}, nullptr};
  auto r = export_fp8_checkpoint(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->quantised, std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight"});
  EXPECT_EQ(r->kept, 2u);

  auto file = read_whole_file(r->model_file);
  ASSERT_TRUE(file.ok());
  auto st = parse_safetensors(*file);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  const TensorBytesView* q = st->find("model.layers.0.self_attn.q_proj.weight");
  const TensorBytesView* s = st->find("model.layers.0.self_attn.q_proj.weight_scale_inv");
  ASSERT_NE(q, nullptr);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(q->dtype, DType::kF8E4M3FN);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{200, 130}));
  EXPECT_EQ(s->dtype, DType::kF32);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{2, 2}));
  // The quantiser's own output, byte for byte.
  TensorRef ref = TensorRef::contiguous("p", DType::kBF16, proj_.data(), 200 * 130);
  ref.shape = {200, 130};
  std::vector<uint8_t> expect_q(200 * 130);
  std::vector<float> expect_s(4);
  ASSERT_TRUE(quantize_fp8_blocks(ref, expect_q, expect_s).ok());
  EXPECT_TRUE(std::equal(q->bytes.begin(), q->bytes.end(), expect_q.begin()));
  EXPECT_EQ(0, std::memcmp(s->bytes.data(), expect_s.data(), 16));
  for (const auto& [name, v] :
       {std::pair{"model.embed_tokens.weight", &embed_}, std::pair{"model.norm.weight", &norm_}}) {
    const TensorBytesView* kept = st->find(name);
    ASSERT_NE(kept, nullptr) << name;
    EXPECT_EQ(kept->dtype, DType::kBF16) << name;
    EXPECT_EQ(0, std::memcmp(kept->bytes.data(), v->data(), v->size() * 2)) << name;
  }

  std::ifstream in(r->config_file);
  const auto config = nlohmann::json::parse(in);
  EXPECT_EQ(config["model_type"], "toy");  // the model's own config.json, kept
  EXPECT_EQ(config["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(config["quantization_config"]["fmt"], "e4m3");
  EXPECT_EQ(config["quantization_config"]["weight_block_size"], (nlohmann::json{128, 128}));
}

TEST_F(Fp8Export, RefusesPatternsThatSelectNothingOrAreNoRegexOrPickAVector) {
  auto none = export_fp8_checkpoint({model(), out(), {"nothing_here"}, nullptr});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no tensor"), std::string::npos);
  auto bad = export_fp8_checkpoint({model(), out(), {"(unclosed"}, nullptr});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'(unclosed'"), std::string::npos);
  auto vec = export_fp8_checkpoint({model(), out(), {R"(.*norm\.weight)"}, nullptr});
  ASSERT_FALSE(vec.ok());
  EXPECT_NE(vec.status().message().find("'model.norm.weight'"), std::string::npos)
      << vec.status().to_string();
  EXPECT_FALSE(fs::exists(out() + "/model.safetensors"));  // nothing written on a refusal
}

TEST_F(Fp8Export, NeverWritesOverItsInput) {
  auto r = export_fp8_checkpoint({model(), dir_.string(), {}, nullptr});
  ASSERT_FALSE(r.ok());
  auto file = read_whole_file(model());
  ASSERT_TRUE(file.ok());
  auto st = parse_safetensors(*file);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->find("model.layers.0.self_attn.q_proj.weight")->dtype, DType::kBF16);
}

}  // namespace
}  // namespace weightcast
