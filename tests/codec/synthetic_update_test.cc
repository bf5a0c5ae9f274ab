#include "codec/workload/synthetic_update.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/workload/model_shapes.h"

namespace weightcast {
namespace {

uint16_t bf16_of_bits(uint32_t bits) {
  return SyntheticTensor::to_bf16(std::bit_cast<float>(bits));
}

bool is_bf16_nan(uint16_t b) {
  return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0;
}

TEST(SyntheticUpdate, Bf16RoundsToNearestEven) {
  EXPECT_EQ(SyntheticTensor::to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_of_bits(0x3F808000u), 0x3F80);  // tie, even below
  EXPECT_EQ(bf16_of_bits(0x3F818000u), 0x3F82);  // tie, even above
  EXPECT_EQ(bf16_of_bits(0x3F808001u), 0x3F81);  // just above the tie
  EXPECT_EQ(bf16_of_bits(0x3F807FFFu), 0x3F80);  // just below the tie
  EXPECT_EQ(SyntheticTensor::to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(SyntheticTensor::to_bf16(0.0f), 0x0000);
  EXPECT_EQ(SyntheticTensor::to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bf16_of_bits(0x7F7FFFFFu), 0x7F80);  // FLT_MAX rounds up to infinity
  EXPECT_TRUE(is_bf16_nan(SyntheticTensor::to_bf16(std::numeric_limits<float>::quiet_NaN())));
  // Payload only in the low 16 bits: truncation alone would make it an infinity.
  EXPECT_TRUE(is_bf16_nan(bf16_of_bits(0x7F800001u)));
  const uint16_t negative_nan = bf16_of_bits(0xFFFFFFFFu);
  EXPECT_TRUE(is_bf16_nan(negative_nan));
  EXPECT_EQ(negative_nan & 0x8000, 0x8000);
}

// Not a multiple of the block, and odd, so the last block and chunk are partial.
constexpr uint64_t kOddElements = 3 * kSyntheticBlock + 4097;

TEST(SyntheticUpdate, SameBitsForAnyThreadCount) {
  ThreadPool one(1);
  ThreadPool two(2);
  SyntheticTensor serial(kOddElements, 512, 7);
  SyntheticTensor pooled1(kOddElements, 512, 7, &one);
  SyntheticTensor pooled2(kOddElements, 512, 7, &two);
  for (uint64_t s = 1; s <= 3; ++s) {
    serial.step(1e-3, s);
    pooled1.step(1e-3, s, &one);
    pooled2.step(1e-3, s, &two);
  }
  const auto same_bits = [](std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
  };
  EXPECT_TRUE(same_bits(serial.master(), pooled1.master()));
  EXPECT_TRUE(same_bits(serial.master(), pooled2.master()));
  EXPECT_EQ(measured_density(serial.bf16(), pooled1.bf16()), 0.0);
  EXPECT_EQ(measured_density(serial.bf16(), pooled2.bf16()), 0.0);
}

TEST(SyntheticUpdate, SeedsSelectDistinctStreams) {
  const SyntheticTensor a(kSyntheticBlock, 64, 1);
  const SyntheticTensor b(kSyntheticBlock, 64, 2);
  EXPECT_GT(measured_density(a.bf16(), b.bf16()), 0.99);

  SyntheticTensor c(kSyntheticBlock, 64, 1);
  SyntheticTensor d(kSyntheticBlock, 64, 1);
  c.step(1e-2, 1);
  d.step(1e-2, 2);
  EXPECT_GT(measured_density(c.bf16(), d.bf16()), 0.5);
}

TEST(SyntheticUpdate, InitIsNormalWithSigmaFromFanIn) {
  const SyntheticTensor t(uint64_t{1} << 20, 1024, 3);
  EXPECT_EQ(t.sigma(), 1.0 / 32);
  double sum = 0, sum2 = 0;
  for (float w : t.master()) {
    sum += w;
    sum2 += double{w} * w;
  }
  const double n = static_cast<double>(t.elements());
  EXPECT_NEAR(sum / n, 0.0, 5e-3 * t.sigma());
  EXPECT_NEAR(std::sqrt(sum2 / n - (sum / n) * (sum / n)), t.sigma(), 5e-3 * t.sigma());
  for (uint64_t i = 0; i < t.elements(); ++i) {
    ASSERT_EQ(t.bf16()[i], SyntheticTensor::to_bf16(t.master()[i])) << i;
  }
}

TEST(SyntheticUpdate, StepMovesByClampedNoiseTimesLr) {
  SyntheticTensor t(kOddElements, 256, 11);
  const std::vector<float> before(t.master().begin(), t.master().end());
  const double lr = 1e-3;
  t.step(lr, 5);
  double sum2 = 0;
  for (uint64_t i = 0; i < t.elements(); ++i) {
    const double d = (double{before[i]} - t.master()[i]) / lr;
    ASSERT_LE(std::abs(d), 3.0 + 1e-2) << i;  // clamped to 3, plus fp32 rounding of w
    sum2 += d * d;
    ASSERT_EQ(t.bf16()[i], SyntheticTensor::to_bf16(t.master()[i])) << i;
  }
  // E[clamp(z, -3, 3)^2] = 0.9866 for a standard normal.
  EXPECT_NEAR(sum2 / static_cast<double>(t.elements()), 0.9866, 0.02);

  const std::vector<uint16_t> bits(t.bf16().begin(), t.bf16().end());
  t.step(0.0, 6);
  EXPECT_EQ(measured_density(bits, t.bf16()), 0.0);
}

TEST(SyntheticUpdate, CalibratedLrHitsTargetDensity) {
  ThreadPool pool(2);
  SyntheticTensor t(uint64_t{1} << 22, 2048, 21, &pool);
  uint64_t step_seed = 1;
  double lr_at_1_percent = 0;
  for (double target : {0.01, 0.05}) {
    const double lr = calibrate_lr(target, 99, t.fan_in());
    if (target == 0.01) lr_at_1_percent = lr;
    const std::vector<uint16_t> before(t.bf16().begin(), t.bf16().end());
    t.step(lr, step_seed++, &pool);
    EXPECT_NEAR(measured_density(before, t.bf16()), target, 0.1 * target) << "lr " << lr;
  }
  // Only lr / sigma matters: a relative lr scaled by sigma is about the same lr.
  EXPECT_NEAR(calibrate_lr(0.01, 99) * t.sigma() / lr_at_1_percent, 1.0, 0.05);
}

TEST(SyntheticUpdate, MeasuredDensity) {
  const std::vector<uint16_t> a = {1, 2, 3, 4};
  const std::vector<uint16_t> b = {1, 0, 3, 0};
  EXPECT_EQ(measured_density(a, b), 0.5);
  EXPECT_EQ(measured_density({}, {}), 0.0);
  EXPECT_TRUE(std::isnan(measured_density(a, std::span<const uint16_t>(b).first(3))));
}

const TensorShapeSpec* find_spec(const std::vector<TensorShapeSpec>& specs,
                                 const std::string& name) {
  for (const auto& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

size_t count_experts(const std::vector<TensorShapeSpec>& specs) {
  size_t n = 0;
  for (const auto& s : specs) n += s.name.find(".mlp.experts.") != std::string::npos;
  return n;
}

TEST(ModelShapes, FamilyNames) {
  ASSERT_TRUE(model_family_from_name("qwen3-30b-a3b").ok());
  EXPECT_EQ(*model_family_from_name("qwen3-30b-a3b"), ModelFamily::kQwen3_30B_A3B);
  EXPECT_EQ(*model_family_from_name("glm-moe"), ModelFamily::kGlmMoe);
  const auto bad = model_family_from_name("llama");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(model_family_name(ModelFamily::kGlmMoe), "glm-moe");
}

TEST(ModelShapes, Qwen3FullScale) {
  const auto specs = model_layer_list(ModelFamily::kQwen3_30B_A3B, 1.0);
  EXPECT_NEAR(static_cast<double>(total_elements(specs)), 30.5e9, 0.02 * 30.5e9);
  EXPECT_EQ(count_experts(specs), size_t{48 * 128 * 3});
  const auto* down = find_spec(specs, "model.layers.47.mlp.experts.127.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{2048, 768}));
  EXPECT_EQ(down->fan_in, 768);
  const auto* router = find_spec(specs, "model.layers.0.mlp.gate.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->shape, (std::vector<int64_t>{128, 2048}));
  const auto* q = find_spec(specs, "model.layers.3.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{4096, 2048}));
  const auto* k_norm = find_spec(specs, "model.layers.3.self_attn.k_norm.weight");
  ASSERT_NE(k_norm, nullptr);
  EXPECT_EQ(k_norm->shape, (std::vector<int64_t>{128}));
  ASSERT_NE(find_spec(specs, "lm_head.weight"), nullptr);
  ASSERT_NE(find_spec(specs, "model.norm.weight"), nullptr);
}

TEST(ModelShapes, GlmFullScale) {
  const auto specs = model_layer_list(ModelFamily::kGlmMoe, 1.0);
  EXPECT_NEAR(static_cast<double>(total_elements(specs)), 106e9, 0.02 * 106e9);
  EXPECT_EQ(count_experts(specs), size_t{45 * 128 * 3});
  const auto* dense = find_spec(specs, "model.layers.0.mlp.gate_proj.weight");
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ(dense->shape, (std::vector<int64_t>{10944, 4096}));
  EXPECT_EQ(find_spec(specs, "model.layers.0.mlp.gate.weight"), nullptr);
  const auto* bias = find_spec(specs, "model.layers.1.mlp.gate.e_score_correction_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->shape, (std::vector<int64_t>{128}));
  const auto* shared = find_spec(specs, "model.layers.45.mlp.shared_experts.down_proj.weight");
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->shape, (std::vector<int64_t>{4096, 1408}));
  const auto* q_bias = find_spec(specs, "model.layers.2.self_attn.q_proj.bias");
  ASSERT_NE(q_bias, nullptr);
  EXPECT_EQ(q_bias->shape, (std::vector<int64_t>{12288}));
}

TEST(ModelShapes, ScaledDownKeepsExperts) {
  for (ModelFamily f : {ModelFamily::kQwen3_30B_A3B, ModelFamily::kGlmMoe}) {
    const auto full = model_layer_list(f, 1.0);
    const auto small = model_layer_list(f, 0.05);
    EXPECT_LT(total_elements(small) * 1000, total_elements(full)) << model_family_name(f);
    EXPECT_GT(count_experts(small), 0u) << model_family_name(f);
    for (const auto& s : small) {
      for (int64_t d : s.shape) ASSERT_GE(d, 1) << s.name;
      ASSERT_GE(s.fan_in, 1) << s.name;
    }
  }
  // Even the smallest GLM keeps an MoE layer after its dense one.
  EXPECT_GT(count_experts(model_layer_list(ModelFamily::kGlmMoe, 1e-6)), 0u);
}

}  // namespace
}  // namespace weightcast
