#include "codec/float_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace weightcast {
namespace {

TEST(FloatConvert, HalfToFloatIsExact) {
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC000), -2.0f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);                  // largest finite half
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(half_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_EQ(std::bit_cast<uint32_t>(half_to_float(0x7E01)), 0x7FC02000u);  // NaN payload kept
}

TEST(FloatConvert, FloatToBf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7FC01234u)), 0x7FC0);
}

}  // namespace
}  // namespace weightcast
