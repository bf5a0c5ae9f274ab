// The checksum's block kernel in AVX2, for CPUs that have it (checksum.cc dispatches).
#pragma once

#include <cstddef>
#include <cstdint>

namespace weightcast {

// For the n (< 2^32) elements of `elem_size` bytes (1, 2 or 4) at p, with local index j:
// *s = sum m(bits_j), *w = sum (j + 1) * m(bits_j), both mod 2^64. Only call when
// cpu_has_avx2().
void checksum_block_avx2(const uint8_t* p, uint32_t n, size_t elem_size, uint64_t* s, uint64_t* w);

}  // namespace weightcast
