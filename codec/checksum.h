// The tensor checksum of ARCHITECTURE.md §3, the one definition used by every implementation:
//
//   C(T) = sum over i of (i + 1) * m(bits_i)   (mod 2^64)
//
// where i is the element's flat row-major index in the logical full tensor and bits_i its raw
// bits. m() is MurmurHash3's fmix32 of (bits ^ 0x9E3779B9) for elements of up to 32 bits;
// 64-bit elements mix both halves (see checksum_mix). Because the sum is over global indices,
// a shard computes its part and the parts of a tensor add up to the whole; a change at index
// i updates C in O(1). docs/FORMATS.md publishes test vectors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/base/status.h"
#include "codec/hd.h"
#include "codec/tensor_ref.h"

namespace weightcast {

class ThreadPool;

inline constexpr uint32_t kChecksumSeed32 = 0x9E3779B9u;
inline constexpr uint32_t kChecksumSeedHigh32 = 0x7F4A7C15u;

WC_HD inline uint32_t checksum_fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// m(bits) for an element of `elem_size` bytes (1, 2, 4 or 8) whose bits are zero-extended.
WC_HD inline uint64_t checksum_mix(uint64_t bits, size_t elem_size) {
  if (elem_size <= 4) return checksum_fmix32(static_cast<uint32_t>(bits) ^ kChecksumSeed32);
  const uint64_t lo = checksum_fmix32(static_cast<uint32_t>(bits) ^ kChecksumSeed32);
  const uint64_t hi = checksum_fmix32(static_cast<uint32_t>(bits >> 32) ^ kChecksumSeedHigh32);
  return lo + (hi << 32);
}

// The change of C when the element at global index `index` goes from `old_bits` to
// `new_bits`: add the result to C (mod 2^64).
WC_HD inline uint64_t checksum_change(uint64_t index, uint64_t old_bits, uint64_t new_bits,
                                      size_t elem_size) {
  return (index + 1) * (checksum_mix(new_bits, elem_size) - checksum_mix(old_bits, elem_size));
}

// C over `count` contiguous elements of `elem_size` bytes (1, 2, 4 or 8) at `data`, the first
// of which has global index `first_index`. Runs on `pool` when given and worth it.
uint64_t checksum_range(const void* data, size_t elem_size, uint64_t count, uint64_t first_index,
                        ThreadPool* pool = nullptr);

// C over a view (any strides): element k of the view has global index first_index + k. Host
// views here, CUDA ones on their GPU (the codec library's dispatch, device_dispatch.cc).
Result<uint64_t> checksum_view(const TensorRef& view, uint64_t first_index = 0,
                               ThreadPool* pool = nullptr);

}  // namespace weightcast
