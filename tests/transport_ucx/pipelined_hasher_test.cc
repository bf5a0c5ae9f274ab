// PipelinedHasher: the digest equals XXH3_64bits of the buffer however its bytes land (all at
// once, in uneven pieces from another thread, none at all), jobs follow one another with and
// without the helper falling asleep in between, and abandon() returns while bytes are still
// missing. copy_from_mapping: byte-equal to memcpy at every relative alignment.
#include "transport/ucx/pipelined_hasher.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "transport/ucx/mapped_copy.h"

namespace weightcast::testing {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(PipelinedHasher, DigestMatchesOneShotXxh3) {
  PipelinedHasher hasher;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{256} << 10, (size_t{3} << 20) + 7}) {
    const auto bytes = random_bytes(n, static_cast<uint32_t>(n));
    hasher.begin(bytes.data(), bytes.size());
    hasher.landed(bytes.size());
    EXPECT_EQ(hasher.finish(), XXH3_64bits(bytes.data(), bytes.size())) << n << " bytes";
  }
}

// The buffer is filled piece by piece while the helper hashes behind: the digest covers the
// final bytes, not what was there before they landed.
TEST(PipelinedHasher, HashesBytesAsTheyLand) {
  PipelinedHasher hasher;
  const auto source = random_bytes((size_t{5} << 20) + 123, 7);
  std::vector<uint8_t> dest(source.size(), 0);
  std::mt19937 rng(11);
  for (int round = 0; round < 5; ++round) {
    std::fill(dest.begin(), dest.end(), 0);
    hasher.begin(dest.data(), dest.size());
    size_t done = 0;
    while (done < dest.size()) {
      const size_t n = std::min<size_t>(dest.size() - done, 1 + rng() % (300 << 10));
      std::memcpy(dest.data() + done, source.data() + done, n);
      done += n;
      hasher.landed(done);
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    EXPECT_EQ(hasher.finish(), XXH3_64bits(source.data(), source.size())) << "round " << round;
  }
}

// A job after the helper has gone to sleep (longer than it stays awake) still completes.
TEST(PipelinedHasher, WakesForAJobAfterSleeping) {
  PipelinedHasher hasher;
  const auto bytes = random_bytes(100000, 3);
  for (int i = 0; i < 3; ++i) {
    hasher.begin(bytes.data(), bytes.size());
    hasher.landed(bytes.size());
    EXPECT_EQ(hasher.finish(), XXH3_64bits(bytes.data(), bytes.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(PipelinedHasher, AbandonReturnsWithBytesMissingAndTheNextJobIsClean) {
  PipelinedHasher hasher;
  const auto bytes = random_bytes(1 << 20, 5);
  hasher.begin(bytes.data(), bytes.size());
  hasher.landed(bytes.size() / 3);  // the rest never lands
  const auto t0 = std::chrono::steady_clock::now();
  hasher.abandon();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  hasher.begin(bytes.data(), bytes.size());
  hasher.landed(bytes.size());
  EXPECT_EQ(hasher.finish(), XXH3_64bits(bytes.data(), bytes.size()));
}

TEST(MappedCopy, EqualsMemcpyAtEveryAlignment) {
  const auto source = random_bytes(70000, 9);
  std::vector<uint8_t> got(source.size() + 64), want(source.size() + 64);
  for (size_t from_offset = 0; from_offset < 64; from_offset += 3) {
    for (size_t to_offset = 0; to_offset < 64; to_offset += 5) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{127}, size_t{128}, size_t{129},
                       size_t{4097}, size_t{65536}}) {
        std::fill(got.begin(), got.end(), 0xEE);
        std::fill(want.begin(), want.end(), 0xEE);
        copy_from_mapping(got.data() + to_offset, source.data() + from_offset, n);
        std::memcpy(want.data() + to_offset, source.data() + from_offset, n);
        ASSERT_EQ(got, want) << n << " bytes, from +" << from_offset << " to +" << to_offset;
      }
    }
  }
}

}  // namespace
}  // namespace weightcast::testing
