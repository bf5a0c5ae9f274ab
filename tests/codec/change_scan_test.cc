// The change scan (codec/change_scan.h): scan_changes and scan_and_copy_changes find exactly
// the elements whose bits differ, in ascending order, for every element size, length and
// density; the fused variant also leaves the new values in the live buffer and returns the
// old bits. The suite runs on the AVX-512, AVX2 and portable kernels (tests/CMakeLists.txt
// sets WEIGHTCAST_NO_AVX512 / WEIGHTCAST_NO_AVX2 for the latter two).
#include "codec/change_scan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/codec/kernel_cases.h"

namespace weightcast {
namespace {

uint32_t bits_at(const std::vector<uint8_t>& bytes, size_t es, uint32_t i) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + size_t{i} * es, es);
  return v;
}

class ChangeScan : public ::testing::TestWithParam<KernelCase> {};

TEST_P(ChangeScan, FindsExactlyTheChangedElementsAndCopiesTheNewOnes) {
  const auto [es, n, density] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(es * 1000003 + n));
  std::vector<uint8_t> before(size_t{n} * es), after;
  for (auto& b : before) b = static_cast<uint8_t>(rng());
  after = before;
  std::vector<uint32_t> expected;
  std::bernoulli_distribution change(density);
  for (uint32_t i = 0; i < n; ++i) {
    if (!change(rng)) continue;
    // Flip one bit of one byte: the smallest change, in any byte of the element.
    after[size_t{i} * es + rng() % es] ^= static_cast<uint8_t>(1u << (rng() % 8));
    expected.push_back(i);
  }

  std::vector<uint32_t> positions(n + 1, 0xDEADBEEF);
  const uint32_t found = scan_changes(before.data(), after.data(), n, es, positions.data());
  ASSERT_EQ(found, expected.size());
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), positions.begin()));
  EXPECT_EQ(positions[n], 0xDEADBEEF) << "wrote past the n entries";

  std::vector<uint8_t> live = before;
  std::vector<uint32_t> fused(n + 1, 0xDEADBEEF), old_bits(n + 1, 0xDEADBEEF);
  const uint32_t copied =
      scan_and_copy_changes(live.data(), after.data(), n, es, fused.data(), old_bits.data());
  ASSERT_EQ(copied, expected.size());
  EXPECT_EQ(live, after) << "the live buffer must hold the new values";
  for (uint32_t k = 0; k < copied; ++k) {
    ASSERT_EQ(fused[k], expected[k]) << "change " << k;
    ASSERT_EQ(old_bits[k], bits_at(before, es, expected[k])) << "old bits of change " << k;
  }
  EXPECT_EQ(fused[n], 0xDEADBEEF) << "wrote past the n entries";
  EXPECT_EQ(old_bits[n], 0xDEADBEEF) << "wrote past the n entries";
}

INSTANTIATE_TEST_SUITE_P(Sizes, ChangeScan,
                         ::testing::ValuesIn(kernel_cases({0u, 1u, 15u, 16u, 31u, 64u, 65u, 1000u,
                                                           65536u})),
                         kernel_case_name);

}  // namespace
}  // namespace weightcast
