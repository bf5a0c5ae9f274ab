// CopyingHasher: copies a part into its destination and computes the XXH3-64 of the copied
// bytes in the same pass (UcxSubscriberTransport's mapped path: a part read by loads from a
// publisher's shared memory, verified before fetch returns).
//
// Why not memcpy and then XXH3_64bits: that reads every byte twice and does the two passes one
// after the other. Fused, each 64-byte stripe is loaded once into vector registers, stored to
// the destination and folded into XXH3's accumulators from those registers; the copy is
// bound by memory and the hash by arithmetic, so they overlap in the core. The figures
// (against memcpy alone, memcpy then XXH3, and a hashing helper thread) are in
// docs/PERFORMANCE.md "UCX part fetch"; the choice in docs/DECISIONS.md.
//
// The digest is XXH3_64bits (seed 0, default secret) of the destination, bit for bit: inputs
// over 240 bytes follow XXH3's long-input algorithm (1 KiB blocks of 16 stripes, a scramble
// after each full block, the last stripe and the merge as in the xxHash specification); the
// secret is obtained from libxxhash (XXH3_generateSecret_fromSeed(0) is the default secret)
// and shorter inputs are hashed by libxxhash after the copy. Tests compare with
// XXH3_64bits for every size class. On CPUs without AVX2 it copies, then calls libxxhash.
//
// Contract: one part per object. copy() is called with consecutive pieces of the part, each a
// multiple of kBlockBytes except the last, together exactly dest.size() bytes; then digest().
// The source must not overlap the destination. The destination must stay untouched until
// digest() returns (the final stripes are hashed from it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace weightcast {

class CopyingHasher {
 public:
  // XXH3's block: 16 stripes of 64 bytes with the default secret.
  static constexpr size_t kBlockBytes = 1024;

  explicit CopyingHasher(std::span<uint8_t> dest);

  // Copies the next from.size() bytes of the part from `from`.
  void copy(std::span<const uint8_t> from);
  // Bytes copied so far.
  size_t copied() const { return done_; }
  // XXH3_64bits of the destination; requires copied() == dest.size().
  [[nodiscard]] uint64_t digest() const;

 private:
  std::span<uint8_t> dest_;
  size_t done_ = 0;
  // Bytes in the full blocks that are scrambled: all but the last 1..1024 bytes, which XXH3
  // treats as a partial block (hashed from dest_ by digest()). Zero below the long size.
  size_t scrambled_bytes_ = 0;
  bool fused_ = false;  // long input on a CPU with AVX2
  alignas(32) uint64_t acc_[8];
};

}  // namespace weightcast
