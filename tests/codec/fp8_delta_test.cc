// Deltas of block-FP8 tensors (docs/ARCHITECTURE.md §4 "FP8"): an FP8 group's versions differ
// in their float8_e4m3fn values and in their fp32 scale grids, each carried by its own record.
// Both round-trip and verify; a record applied twice, to another version, or shifted by one
// element is refused and leaves the engine's bytes as they were; a version whose scales alone
// changed, and one whose values alone changed, are both carried.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>

#include "codec/base/byte_io.h"
#include "codec/fp8_quantize.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::encode;
using testing::view_of;

constexpr int64_t kRows = 256, kCols = 384;  // a 2 x 3 grid of blocks

struct Quantised {
  std::vector<uint8_t> values;
  std::vector<uint8_t> scales;  // the fp32 grid's bytes
};

std::vector<float> random_matrix(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> m(kRows * kCols);
  for (auto& x : m) x = d(rng);
  return m;
}

Quantised quantise(std::vector<float>& m) {
  TensorRef ref = TensorRef::contiguous("w", DType::kF32, m.data(), kRows * kCols);
  ref.shape = {kRows, kCols};
  Quantised q{std::vector<uint8_t>(kRows * kCols), std::vector<uint8_t>(6 * sizeof(float))};
  std::vector<float> s(6);
  EXPECT_TRUE(quantize_fp8_blocks(ref, q.values, s).ok());
  std::memcpy(q.scales.data(), s.data(), q.scales.size());
  return q;
}

// Applies `record` to `dest`; the Status of the apply.
Status apply(const std::vector<uint8_t>& record, std::vector<uint8_t>& dest, DType dtype) {
  auto parsed = parse_delta_record(record);
  if (!parsed.ok()) return parsed.status();
  auto applied = apply_delta(*parsed, view_of(dest, dtype));
  return applied.ok() ? ok_status() : applied.status();
}

class Fp8Delta : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<float> m = random_matrix(5);
    before_ = quantise(m);
    std::mt19937_64 rng(6);
    std::uniform_int_distribution<size_t> at(0, m.size() - 1);
    for (int k = 0; k < 500; ++k) m[at(rng)] *= 1.05f;  // a sparse step
    after_ = quantise(m);
    ASSERT_NE(before_.values, after_.values);
  }
  Quantised before_, after_;
};

TEST_F(Fp8Delta, ValuesAndScalesRoundTripAndVerify) {
  auto values = encode(before_.values, after_.values, DType::kF8E4M3FN, 4096);
  auto scales = encode(before_.scales, after_.scales, DType::kF32);
  ASSERT_TRUE(values.ok() && scales.ok());
  EXPECT_GT(values->header.changed, 0u);
  EXPECT_LT(values->header.changed, static_cast<uint64_t>(kRows * kCols) / 10);
  std::vector<uint8_t> v = before_.values, s = before_.scales;
  ASSERT_TRUE(apply(values->record, v, DType::kF8E4M3FN).ok());
  ASSERT_TRUE(apply(scales->record, s, DType::kF32).ok());
  EXPECT_EQ(v, after_.values);
  EXPECT_EQ(s, after_.scales);
}

TEST_F(Fp8Delta, AppliedTwiceOrToAnotherVersionIsRefusedAndLeavesTheBytes) {
  auto values = encode(before_.values, after_.values, DType::kF8E4M3FN, 4096);
  ASSERT_TRUE(values.ok());
  std::vector<uint8_t> v = before_.values;
  ASSERT_TRUE(apply(values->record, v, DType::kF8E4M3FN).ok());
  Status twice = apply(values->record, v, DType::kF8E4M3FN);
  EXPECT_EQ(twice.code(), StatusCode::kFailedPrecondition) << twice.to_string();
  EXPECT_EQ(v, after_.values);
  std::vector<float> other = random_matrix(9);
  std::vector<uint8_t> elsewhere = quantise(other).values;
  const auto kept = elsewhere;
  EXPECT_EQ(apply(values->record, elsewhere, DType::kF8E4M3FN).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(elsewhere, kept);
}

TEST_F(Fp8Delta, ARecordShiftedByOneElementFailsItsChecksumAndReverts) {
  auto good = encode(before_.values, after_.values, DType::kF8E4M3FN, 4096);
  ASSERT_TRUE(good.ok());
  // The same new values one element later, under the true record's target checksum: what an
  // encoder off by one in its positions would produce.
  std::vector<uint8_t> shifted = before_.values;
  for (size_t i = 0; i + 1 < shifted.size(); ++i) {
    if (before_.values[i] != after_.values[i]) shifted[i + 1] = after_.values[i];
  }
  auto bad = encode(before_.values, shifted, DType::kF8E4M3FN, 4096);
  ASSERT_TRUE(bad.ok());
  constexpr size_t kTargetChecksumOffset = 64;
  store_le<uint64_t>(bad->record.data() + kTargetChecksumOffset, good->header.target_checksum);
  const size_t body = bad->record.size() - kDeltaTrailerBytes;
  store_le<uint64_t>(bad->record.data() + body, XXH3_64bits(bad->record.data(), body));
  std::vector<uint8_t> v = before_.values;
  EXPECT_EQ(apply(bad->record, v, DType::kF8E4M3FN).code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(v, before_.values) << "a failed apply must leave the old version intact";
}

// The record from `from` to `to` changes one element and brings `from` to `to`.
void expect_one_change_carried(const std::vector<uint8_t>& from, const std::vector<uint8_t>& to,
                               DType dtype) {
  auto delta = encode(from, to, dtype);
  ASSERT_TRUE(delta.ok());
  EXPECT_EQ(delta->header.changed, 1u) << dtype_name(dtype);
  std::vector<uint8_t> bytes = from;
  ASSERT_TRUE(apply(delta->record, bytes, dtype).ok());
  EXPECT_EQ(bytes, to) << dtype_name(dtype);
}

TEST(Fp8DeltaCases, AScaleChangeWithTheSameValuesAndTheReverseAreBothCarried) {
  std::vector<float> m = random_matrix(3);
  const Quantised base = quantise(m);
  // A whole block doubles: every x / s is the same, so are the values; its scale doubles.
  std::vector<float> doubled = m;
  for (int64_t r = 0; r < 128; ++r) {
    for (int64_t c = 128; c < 256; ++c) doubled[r * kCols + c] *= 2.0f;
  }
  const Quantised scaled = quantise(doubled);
  EXPECT_EQ(scaled.values, base.values);
  expect_one_change_carried(base.scales, scaled.scales, DType::kF32);
  // One element below its block's amax halves: its value changes, no scale does.
  std::vector<float> halved = m;
  halved[5 * kCols + 7] *= 0.5f;
  const Quantised moved = quantise(halved);
  EXPECT_EQ(moved.scales, base.scales);
  expect_one_change_carried(base.values, moved.values, DType::kF8E4M3FN);
}

}  // namespace
}  // namespace weightcast
