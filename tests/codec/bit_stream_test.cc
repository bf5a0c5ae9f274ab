// The delta codec's bit streams (codec/bit_stream.h): what BitSink puts BitReader gets back,
// fields and unary codes mixed at every alignment; a read past the end is a sticky overrun
// that yields zeros; and a unary code read when the reader's 64-bit accumulator is full to its
// last bit (the byte-by-byte refill near the end of a span) is counted, not shifted by 64.
#include "codec/bit_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace weightcast {
namespace {

TEST(BitStream, WhatTheWriterPutsTheReaderGetsBackAtEveryAlignment) {
  std::mt19937_64 rng(5);
  struct Item {
    bool unary;
    uint32_t value;
    unsigned bits;
  };
  std::vector<Item> items;
  uint64_t total_bits = 0;
  for (int i = 0; i < 20000; ++i) {
    if (rng() % 4 == 0) {
      const auto count = static_cast<uint32_t>(rng() % 80);
      items.push_back({true, count, 0});
      total_bits += count + 1;
    } else {
      const auto bits = static_cast<unsigned>(rng() % 33);
      items.push_back({false, static_cast<uint32_t>(rng()) & bit_mask(bits), bits});
      total_bits += bits;
    }
  }
  const size_t size = (total_bits + 7) / 8;
  std::vector<uint8_t> bytes(size + kBitSinkSlack, 0xEE);
  BitSink w(bytes.data());
  for (const auto& it : items) {
    if (it.unary) {
      w.put_unary(it.value);
    } else {
      w.put(it.value, it.bits);
    }
  }
  ASSERT_EQ(static_cast<size_t>(w.flush() - bytes.data()), size);
  bytes.resize(size);
  BitReader r(bytes);
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    const uint64_t got = it.unary ? r.get_unary(1000) : r.get(it.bits);
    ASSERT_EQ(got, it.value) << "item " << i << (it.unary ? " (unary)" : "");
  }
  EXPECT_FALSE(r.overrun());
  EXPECT_EQ(r.bytes_consumed(), bytes.size());
}

// `n` bytes of 0xFF, made where the compiler cannot see their count: with a visible 3-byte
// buffer GCC warns about the reader's 8-byte load on a path the size check never takes.
[[gnu::noinline]] std::vector<uint8_t> ones(size_t n) {
  return std::vector<uint8_t>(n, 0xFF);
}

TEST(BitStream, AReadPastTheEndIsAStickyOverrunThatYieldsZeros) {
  const std::vector<uint8_t> bytes = ones(3);
  BitReader r(bytes);
  EXPECT_EQ(r.get(20), 0xFFFFFu);
  EXPECT_FALSE(r.overrun());
  EXPECT_EQ(r.get(8), 0u);  // 4 bits left, 8 asked
  EXPECT_TRUE(r.overrun());
  EXPECT_EQ(r.get(1), 0u);
  EXPECT_TRUE(r.overrun());

  const std::vector<uint8_t> two = ones(2);
  BitReader u(two);
  EXPECT_EQ(u.get_unary(1000), 16u);  // no terminating zero before the end
  EXPECT_TRUE(u.overrun());
  const std::vector<uint8_t> many_ones = ones(64);
  BitReader limited(many_ones);
  EXPECT_GT(limited.get_unary(100), 100u);  // stops counting past the limit
  EXPECT_TRUE(limited.overrun());
}

TEST(BitStream, AUnaryCodeEndingInTheLastBitOfAFullAccumulatorIsCounted) {
  // 12 bytes: the first refill loads 7 (56 bits), get(32) leaves 24, and the refill for the
  // unary code takes the last 5 bytes one by one (fewer than 8 remain), which may fill the
  // 64-bit accumulator to its last bit. Every bit is one but the very last: 63 ones then the
  // terminating zero in bit 63 of the accumulator. (The refill used to fill all 64 bits there
  // and the code then shifted the accumulator by 64: undefined, which make test-asan stops.)
  std::vector<uint8_t> bytes(12, 0xFF);
  bytes.back() = 0x7F;
  BitReader r(bytes);
  EXPECT_EQ(r.get(32), 0xFFFFFFFFu);
  EXPECT_EQ(r.get_unary(1000), 24u + 32u + 7u);
  EXPECT_FALSE(r.overrun());
  EXPECT_EQ(r.bytes_consumed(), bytes.size());
  EXPECT_EQ(r.get(1), 0u);
  EXPECT_TRUE(r.overrun());
}

}  // namespace
}  // namespace weightcast
