#include "codec/checksum_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/checksum.h"

namespace weightcast {

#if defined(__x86_64__)
namespace {

// Eight elements widened to 32-bit lanes.
template <size_t ES>
__attribute__((target("avx2"))) inline __m256i load8(const uint8_t* p) {
  if constexpr (ES == 1) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (ES == 2) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
}

// fmix32(bits ^ seed) of eight elements of ES bytes. For ES <= 2 the bits are below 2^16, so
// the first `h ^= h >> 16` only folds the seed's high half into its low one: one xor with a
// constant instead of three operations (the loop is bound by its vector operations).
template <size_t ES>
__attribute__((target("avx2"))) inline __m256i fmix8(__m256i h) {
  if constexpr (ES <= 2) {
    constexpr uint32_t kFolded = kChecksumSeed32 ^ (kChecksumSeed32 >> 16);
    h = _mm256_xor_si256(h, _mm256_set1_epi32(static_cast<int>(kFolded)));
  } else {
    h = _mm256_xor_si256(h, _mm256_set1_epi32(static_cast<int>(kChecksumSeed32)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  }
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85EBCA6Bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xC2B2AE35u)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

// Lanes hold elements j..j+7; even and odd 32-bit lanes are widened into separate 64-bit
// accumulators. No multiply by the weight (j + 1): with S = sum of m and P = sum of the running
// S after each step, a lane that saw m_0..m_{T-1} at steps t has sum t * m_t = T * S - P, so
// only additions run per element (the fmix multiplies are the only ones left).
template <size_t ES>
__attribute__((target("avx2"))) void sums(const uint8_t* p, uint32_t n, uint64_t* s_out,
                                          uint64_t* w_out) {
  const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFF);
  __m256i s_even = _mm256_setzero_si256(), s_odd = _mm256_setzero_si256();
  __m256i p_even = _mm256_setzero_si256(), p_odd = _mm256_setzero_si256();
  const uint32_t steps = n / 8;
  for (uint32_t t = 0; t < steps; ++t) {
    const __m256i m = fmix8<ES>(load8<ES>(p + size_t{t} * 8 * ES));
    s_even = _mm256_add_epi64(s_even, _mm256_and_si256(m, low32));
    s_odd = _mm256_add_epi64(s_odd, _mm256_srli_epi64(m, 32));
    p_even = _mm256_add_epi64(p_even, s_even);
    p_odd = _mm256_add_epi64(p_odd, s_odd);
  }
  alignas(32) uint64_t se[4], so[4], pe[4], po[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(se), s_even);
  _mm256_store_si256(reinterpret_cast<__m256i*>(so), s_odd);
  _mm256_store_si256(reinterpret_cast<__m256i*>(pe), p_even);
  _mm256_store_si256(reinterpret_cast<__m256i*>(po), p_odd);
  uint64_t s_total = 0, w_total = 0;
  for (uint64_t i = 0; i < 4; ++i) {
    // 64-bit lane i holds elements 8t + 2i (even) and 8t + 2i + 1 (odd).
    s_total += se[i] + so[i];
    w_total += 8 * (steps * se[i] - pe[i]) + (2 * i + 1) * se[i];
    w_total += 8 * (steps * so[i] - po[i]) + (2 * i + 2) * so[i];
  }
  for (uint32_t j = steps * 8; j < n; ++j) {
    uint32_t bits = 0;
    __builtin_memcpy(&bits, p + size_t{j} * ES, ES);
    const uint64_t m = checksum_fmix32(bits ^ kChecksumSeed32);
    s_total += m;
    w_total += uint64_t{j + 1} * m;
  }
  *s_out = s_total;
  *w_out = w_total;
}

}  // namespace

void checksum_block_avx2(const uint8_t* p, uint32_t n, size_t elem_size, uint64_t* s, uint64_t* w) {
  switch (elem_size) {
    case 1:
      sums<1>(p, n, s, w);
      break;
    case 2:
      sums<2>(p, n, s, w);
      break;
    default:
      sums<4>(p, n, s, w);
      break;
  }
}

#else

void checksum_block_avx2(const uint8_t*, uint32_t, size_t, uint64_t*, uint64_t*) {}

#endif

}  // namespace weightcast
