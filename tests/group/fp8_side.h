// The two sides of an FP8 group in the group tests (fp8_publisher_test.cc, fp8_hooked_test.cc):
// a trainer whose packed gate_up bf16 parameter is published as its two column halves, and
// an engine holding their FP8 values and scales; the engine is compared with the codec's
// quantisation of the trainer (which tests/codec checks against NumPy + ml_dtypes).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "codec/float_convert.h"
#include "codec/fp8_quantize.h"
#include "codec/tensor_ref.h"
#include "tests/group/group_harness.h"

namespace weightcast::testing {

inline float bf16_value(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

constexpr int64_t kRows = 300, kCols = 200;  // per half: a 3 x 2 grid, ragged at both edges
constexpr char kFp8[] = "fp8: {quantize: ['.*_proj\\.weight$']}\n";

// The trainer: gate_up [300, 400] bf16, published as its two column halves, and a norm.
struct PackedTrainer {
  std::vector<uint16_t> gate_up = std::vector<uint16_t>(kRows * 2 * kCols);
  std::vector<uint16_t> norm = std::vector<uint16_t>(kCols);
  std::mt19937_64 rng{17};
  PackedTrainer() {
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (auto& x : gate_up) x = float_to_bf16(d(rng));
    for (auto& x : norm) x = float_to_bf16(1.0f + d(rng));
  }
  void step() {  // about 1 % of the elements move, as an optimizer step's would
    std::uniform_int_distribution<size_t> at(0, gate_up.size() - 1);
    for (size_t k = 0; k < gate_up.size() / 100; ++k) {
      auto& x = gate_up[at(rng)];
      x = float_to_bf16(bf16_value(x) * 1.01f + 1e-4f);
    }
    norm[k_step++ % kCols] ^= 1;
  }
  TensorRef half(const char* name, int64_t offset) {
    return TensorRef{name, DType::kBF16, {kRows, kCols}, {2 * kCols, 1}, offset, gate_up.data()};
  }
  std::vector<TensorRef> refs() {
    return {half("mlp.gate_proj.weight", 0), half("mlp.up_proj.weight", kCols),
            TensorRef::contiguous("norm.weight", DType::kBF16, norm.data(), kCols)};
  }
  size_t k_step = 0;
};

// One subscriber, the fp8 section.
inline GroupSpec fp8_group() {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.extra_yaml = kFp8;
  return spec;
}

// The engine: FP8 values and scales of both halves, the norm in bf16.
struct Fp8Engine {
  std::vector<uint8_t> gate = std::vector<uint8_t>(kRows * kCols), up = gate;
  std::vector<float> gate_scale = std::vector<float>(3 * 2), up_scale = gate_scale;
  std::vector<uint16_t> norm = std::vector<uint16_t>(kCols);
  std::vector<TensorRef> refs() {
    auto values = [](const char* name, std::vector<uint8_t>& v) {
      TensorRef r = TensorRef::contiguous(name, DType::kF8E4M3FN, v.data(), kRows * kCols);
      r.shape = {kRows, kCols};
      return r;
    };
    auto scales = [](const char* name, std::vector<float>& v) {
      TensorRef r = TensorRef::contiguous(name, DType::kF32, v.data(), 6);
      r.shape = {3, 2};
      return r;
    };
    return {values("mlp.gate_proj.weight", gate),
            scales("mlp.gate_proj.weight_scale_inv", gate_scale), values("mlp.up_proj.weight", up),
            scales("mlp.up_proj.weight_scale_inv", up_scale),
            TensorRef::contiguous("norm.weight", DType::kBF16, norm.data(), kCols)};
  }
};

// Compares the engine with the codec's quantisation of the trainer's halves (the codec's
// quantiser is checked bit for bit against NumPy + ml_dtypes in tests/codec).
inline void expect_engine_holds(PackedTrainer& t, const Fp8Engine& e, uint64_t v) {
  auto refs = t.refs();
  for (int h = 0; h < 2; ++h) {
    std::vector<uint8_t> q(kRows * kCols);
    std::vector<float> s(6);
    ASSERT_TRUE(quantize_fp8_blocks(refs[h], q, s).ok());
    EXPECT_EQ(q, h == 0 ? e.gate : e.up) << refs[h].name << " at v" << v;
    EXPECT_EQ(s, h == 0 ? e.gate_scale : e.up_scale) << refs[h].name << " at v" << v;
  }
  EXPECT_EQ(t.norm, e.norm) << "v" << v;
}

}  // namespace weightcast::testing
