// Helpers for code shared by the CPU and the CUDA codec: functions marked WC_HD compile as
// __host__ __device__ under nvcc and as plain inline functions elsewhere, so the format's
// arithmetic (checksum mix, value zigzag, chunk coding) has one definition for both sides.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define WC_HD __host__ __device__
#else
#define WC_HD
#endif

namespace weightcast {

// Leading zeros of a non-zero 32-bit value.
WC_HD inline unsigned wc_clz32(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned>(__clz(x));
#else
  return static_cast<unsigned>(__builtin_clz(x));
#endif
}

// Trailing zeros of a non-zero 64-bit value.
WC_HD inline unsigned wc_ctz64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned>(__ffsll(static_cast<long long>(x)) - 1);
#else
  return static_cast<unsigned>(__builtin_ctzll(x));
#endif
}

// Bits needed to write v (0 for v == 0).
WC_HD inline unsigned wc_bit_length(uint32_t v) {
  return v == 0 ? 0u : 32u - wc_clz32(v);
}

}  // namespace weightcast
