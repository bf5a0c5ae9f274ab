// The hooked write's capture (codec/change_capture.h): capture_and_copy_changes leaves the new
// values in the live buffer and, expanded (expand_capture), gives exactly the positions and old
// bits that scan_and_copy_changes gives, and the new bits, for every element size, length
// (partial last blocks and several position windows included) and density, on the AVX2 and
// portable kernels (tests/CMakeLists.txt).
#include "codec/change_capture.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "codec/change_scan.h"
#include "tests/codec/kernel_cases.h"

namespace weightcast {
namespace {

class ChangeCapture : public ::testing::TestWithParam<KernelCase> {};

TEST_P(ChangeCapture, ExpandsToTheScansPositionsAndOldBits) {
  const auto [es, n, density] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(es * 7919 + n));
  std::vector<uint8_t> before(size_t{n} * es), after;
  for (auto& b : before) b = static_cast<uint8_t>(rng());
  after = before;
  std::bernoulli_distribution change(density);
  for (uint32_t i = 0; i < n; ++i) {
    if (change(rng)) after[size_t{i} * es + rng() % es] ^= static_cast<uint8_t>(1u << (rng() % 8));
  }

  std::vector<uint8_t> scanned_live = before;
  std::vector<uint32_t> want_positions(n), want_old(n);
  const uint32_t want = scan_and_copy_changes(scanned_live.data(), after.data(), n, es,
                                              want_positions.data(), want_old.data());

  std::vector<uint8_t> live = before;
  std::vector<uint8_t> capture(capture_bytes(n, es) + 1, 0xA5);
  const uint32_t changed =
      capture_and_copy_changes(live.data(), after.data(), n, es, capture.data());
  EXPECT_EQ(live, after) << "the live buffer must hold the new values";
  EXPECT_EQ(changed, want);
  EXPECT_EQ(capture.back(), 0xA5) << "wrote past capture_bytes";

  std::vector<uint32_t> positions(n + 1, 0xDEADBEEF), old_bits(n + 1, 0xDEADBEEF),
      new_bits(n + 1, 0xDEADBEEF);
  const uint32_t found =
      expand_capture(capture.data(), n, es, positions.data(), old_bits.data(), new_bits.data());
  ASSERT_EQ(found, want);
  for (uint32_t k = 0; k < found; ++k) {
    ASSERT_EQ(positions[k], want_positions[k]) << "change " << k;
    ASSERT_EQ(old_bits[k], want_old[k]) << "old bits of change " << k;
    uint32_t expected_new = 0;
    std::memcpy(&expected_new, after.data() + size_t{positions[k]} * es, es);  // little-endian
    ASSERT_EQ(new_bits[k], expected_new) << "new bits of change " << k;
  }
  EXPECT_EQ(positions[n], 0xDEADBEEFu) << "wrote past the n entries";
  EXPECT_EQ(new_bits[n], 0xDEADBEEFu) << "wrote past the n entries";
}

INSTANTIATE_TEST_SUITE_P(Sizes, ChangeCapture,
                         ::testing::ValuesIn(kernel_cases({0u, 1u, 15u, 16u, 33u, 64u, 65u, 1000u,
                                                           65536u, 3u * 65536u + 77u})),
                         kernel_case_name);

}  // namespace
}  // namespace weightcast
