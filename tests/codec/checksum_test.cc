#include "codec/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "codec/base/thread_pool.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

template <typename T>
uint64_t checksum_of(const std::vector<T>& v, uint64_t first) {
  return checksum_range(v.data(), sizeof(T), v.size(), first);
}

// The vectors published in docs/FORMATS.md (and ARCHITECTURE.md §3).
TEST(Checksum, PublishedTestVectors) {
  EXPECT_EQ(checksum_of(std::vector<uint16_t>{1, 2, 3}, 0), 0x000000036345d8baull);
  EXPECT_EQ(checksum_of(std::vector<uint16_t>{0x7FC1, 0x8000}, uint64_t{1} << 40),
            0x83177c02506a051aull);
  EXPECT_EQ(checksum_of(std::vector<uint8_t>{0, 255}, 0), 0x00000000b1a47980ull);
  EXPECT_EQ(checksum_of(std::vector<uint32_t>{0xDEADBEEF}, 0), 0x00000000b5aebab3ull);
  EXPECT_EQ(checksum_of(std::vector<uint64_t>{0x0123456789ABCDEFull}, 0), 0x10774762089887a8ull);
}

TEST(Checksum, EmptyRangeIsZero) {
  EXPECT_EQ(checksum_range(nullptr, 2, 0, 17), 0u);
}

// The vectorised block path must equal the definition computed one element at a time.
TEST(Checksum, MatchesDefinitionAcrossBlockBoundaries) {
  for (size_t es : {1, 2, 4, 8}) {
    const size_t n = (size_t{1} << 20) + 37;  // crosses the 2^20 inner block
    const auto bytes = testing::random_bytes(n * es, es);
    uint64_t expected = 0;
    const uint64_t first = 123456789;
    for (size_t i = 0; i < n; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, bytes.data() + i * es, es);
      expected += (first + i + 1) * checksum_mix(bits, es);
    }
    EXPECT_EQ(checksum_range(bytes.data(), es, n, first), expected) << "element size " << es;
  }
}

TEST(Checksum, ShardPartsAddUpToTheWhole) {
  const size_t n = 100003;
  const auto bytes = testing::random_bytes(n * 2, 7);
  const uint64_t whole = checksum_range(bytes.data(), 2, n, 0);
  for (size_t cut : {size_t{1}, size_t{4096}, size_t{65536}, n - 1}) {
    const uint64_t a = checksum_range(bytes.data(), 2, cut, 0);
    const uint64_t b = checksum_range(bytes.data() + cut * 2, 2, n - cut, cut);
    EXPECT_EQ(a + b, whole) << "cut at " << cut;
  }
}

TEST(Checksum, IncrementalUpdateEqualsRecomputed) {
  const size_t n = 5000;
  auto bytes = testing::random_bytes(n * 2, 11);
  uint64_t c = checksum_range(bytes.data(), 2, n, 40);
  for (size_t i : {size_t{0}, size_t{17}, n - 1}) {
    uint16_t old_v, new_v;
    std::memcpy(&old_v, bytes.data() + i * 2, 2);
    new_v = static_cast<uint16_t>(old_v ^ 0x8001);
    std::memcpy(bytes.data() + i * 2, &new_v, 2);
    c += checksum_change(40 + i, old_v, new_v, 2);
  }
  EXPECT_EQ(c, checksum_range(bytes.data(), 2, n, 40));
}

TEST(Checksum, PermutationShiftAndDoubleUpdateChangeIt) {
  std::vector<uint16_t> v = {10, 20, 30, 40};
  const uint64_t c = checksum_of(v, 0);
  std::vector<uint16_t> swapped = {20, 10, 30, 40};
  EXPECT_NE(checksum_of(swapped, 0), c);
  EXPECT_NE(checksum_of(v, 1), c);  // the same values one index later
  std::vector<uint16_t> once = {11, 20, 30, 40}, twice = {12, 20, 30, 40};
  EXPECT_NE(checksum_of(once, 0), checksum_of(twice, 0));
}

TEST(Checksum, StridedViewEqualsGatheredCopy) {
  // A [4, 6] u16 allocation; the view is columns 1..3 of every row (shape [4, 3], strides [6, 1]).
  std::vector<uint16_t> alloc(24);
  for (size_t i = 0; i < alloc.size(); ++i) alloc[i] = static_cast<uint16_t>(i * 977);
  TensorRef view;
  view.name = "slice";
  view.dtype = DType::kBF16;
  view.shape = {4, 3};
  view.strides = {6, 1};
  view.offset = 1;
  view.data = alloc.data();
  std::vector<uint16_t> gathered;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) gathered.push_back(alloc[r * 6 + 1 + c]);
  auto c = checksum_view(view, 5);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(*c, checksum_of(gathered, 5));
}

TEST(Checksum, ParallelEqualsSerial) {
  const size_t n = (size_t{1} << 23) + 5;
  const auto bytes = testing::random_bytes(n * 2, 3);
  ThreadPool pool(2);
  EXPECT_EQ(checksum_range(bytes.data(), 2, n, 9, &pool), checksum_range(bytes.data(), 2, n, 9));
}

TEST(Checksum, CudaViewIsRefusedWithTheTensorName) {
  uint16_t x = 0;
  TensorRef view = TensorRef::contiguous("gpu.weight", DType::kBF16, &x, 1);
  view.memory = MemoryKind::kCuda;
  auto c = checksum_view(view);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("gpu.weight"), std::string::npos);
}

}  // namespace
}  // namespace weightcast
