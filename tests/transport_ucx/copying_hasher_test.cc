// CopyingHasher: the copy equals memcpy and the digest equals libxxhash's XXH3_64bits for every
// size class, piece size and destination alignment, and follows the bytes actually copied.
// copy_from_mapping: byte-equal to memcpy at every relative alignment.
#include "transport/ucx/copying_hasher.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
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

// Every XXH3 size class (up to 16, 128, 240 bytes; long inputs with no full block, with the
// last block full or partial, a stripe past a block), pieces of one block up to the whole
// part, and destinations on each store path: the bytes equal memcpy's, nothing outside the
// destination is written, and the digest equals libxxhash's XXH3_64bits of the source.
TEST(CopyingHasher, BytesAndDigestMatchMemcpyAndXxh3) {
  const auto source = random_bytes((size_t{1} << 20) + 4096, 21);
  // 64-byte aligned, so that the offsets below choose the store path: +0 aligned, +16 and +48
  // 16 past a 32-byte boundary (malloc's large blocks), +1 and +33 neither.
  const size_t capacity = source.size() + 128;
  const std::unique_ptr<uint8_t, decltype(&std::free)> buffer(
      static_cast<uint8_t*>(std::aligned_alloc(64, capacity)), &std::free);
  ASSERT_NE(buffer, nullptr);
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{16}, size_t{17}, size_t{128}, size_t{129}, size_t{240},
        size_t{241}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{1088}, size_t{1089},
        size_t{2048}, size_t{2049}, size_t{65536}, size_t{65537}, (size_t{1} << 20) + 7}) {
    for (size_t piece : {size_t{1024}, size_t{4096}, size_t{65536}, source.size()}) {
      for (size_t to_offset : {size_t{0}, size_t{1}, size_t{16}, size_t{33}, size_t{48}}) {
        std::memset(buffer.get(), 0xEE, capacity);
        const std::span<uint8_t> to(buffer.get() + to_offset, n);
        CopyingHasher copier(to);
        while (copier.copied() < n) {
          const size_t done = copier.copied();
          copier.copy({source.data() + done, std::min(piece, n - done)});
        }
        const std::string what = std::to_string(n) + " bytes in pieces of " +
                                 std::to_string(piece) + " to +" + std::to_string(to_offset);
        ASSERT_EQ(copier.digest(), XXH3_64bits(source.data(), n)) << what;
        ASSERT_EQ(std::memcmp(to.data(), source.data(), n), 0) << what;
        ASSERT_EQ(buffer.get()[to_offset + n], 0xEE) << what << ": wrote past the end";
        if (to_offset > 0) {
          ASSERT_EQ(buffer.get()[to_offset - 1], 0xEE) << what << ": wrote before the start";
        }
      }
    }
  }
}

// The digest is of what was copied: a flipped bit anywhere (first block, a middle block, the
// final partial block, the last byte) changes it to that of the changed bytes.
TEST(CopyingHasher, DigestFollowsTheBytesCopied) {
  auto source = random_bytes(10000, 5);
  const uint64_t original = XXH3_64bits(source.data(), source.size());
  std::vector<uint8_t> dest(source.size());
  for (size_t at : {size_t{0}, size_t{5000}, size_t{9300}, source.size() - 1}) {
    source[at] ^= 0x10;
    CopyingHasher copier(dest);
    copier.copy({source.data(), 4096});
    copier.copy({source.data() + 4096, source.size() - 4096});
    EXPECT_EQ(copier.digest(), XXH3_64bits(source.data(), source.size())) << "bit at " << at;
    EXPECT_NE(copier.digest(), original) << "bit at " << at;
    source[at] ^= 0x10;
  }
}

// Pieces that are not whole blocks break the contract for speed, not for correctness: the
// digest is still XXH3 of the destination.
TEST(CopyingHasher, PiecesOffTheBlockGridStillHashCorrectly) {
  const auto source = random_bytes(50000, 8);
  std::vector<uint8_t> dest(source.size());
  CopyingHasher copier(dest);
  for (size_t done = 0; done < source.size(); done = copier.copied()) {
    copier.copy({source.data() + done, std::min<size_t>(1000, source.size() - done)});
  }
  EXPECT_EQ(copier.digest(), XXH3_64bits(source.data(), source.size()));
  EXPECT_EQ(dest, source);
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
