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

__attribute__((target("avx2"))) inline __m256i fmix8(__m256i h) {
  h = _mm256_xor_si256(h, _mm256_set1_epi32(static_cast<int>(kChecksumSeed32)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85EBCA6Bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xC2B2AE35u)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

// Lanes hold elements j..j+7. Even and odd 32-bit lanes are widened separately:
// _mm256_mul_epu32 multiplies the low halves of 64-bit lanes, giving exact 64-bit products.
template <size_t ES>
__attribute__((target("avx2"))) void sums(const uint8_t* p, uint32_t n, uint64_t* s_out,
                                          uint64_t* w_out) {
  const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFF);
  const __m256i eight = _mm256_set1_epi32(8);
  __m256i weight = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8);
  __m256i s = _mm256_setzero_si256(), w = _mm256_setzero_si256();
  uint32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256i m = fmix8(load8<ES>(p + size_t{j} * ES));
    const __m256i m_odd = _mm256_srli_epi64(m, 32);
    s = _mm256_add_epi64(s, _mm256_add_epi64(_mm256_and_si256(m, low32), m_odd));
    w = _mm256_add_epi64(w, _mm256_mul_epu32(m, weight));
    w = _mm256_add_epi64(w, _mm256_mul_epu32(m_odd, _mm256_srli_epi64(weight, 32)));
    weight = _mm256_add_epi32(weight, eight);
  }
  alignas(32) uint64_t sl[4], wl[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(sl), s);
  _mm256_store_si256(reinterpret_cast<__m256i*>(wl), w);
  uint64_t s_total = sl[0] + sl[1] + sl[2] + sl[3];
  uint64_t w_total = wl[0] + wl[1] + wl[2] + wl[3];
  for (; j < n; ++j) {
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
