// The e4m3fn encoding of 8 fp32 quotients x / s on AVX2, shared by the quantiser's division
// paths (codec/fp8_quantize.cc for fp32, fp16 and strided rows; codec/fp8_quantize_avx2.cc for
// the bf16 values its table cannot encode). Same codes, bit for bit, as float_to_e4m3fn of
// the quotient clamped to +-448.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include "codec/fp8_quantize.h"

namespace weightcast {

// One code per 32-bit lane, the sign in bit 7: |v| clamped to 448 by a MINPS that lets a NaN
// through, rounded to its e4m3fn step by one fp32 addition of 2^(max(e, -6) + 20), whose ulp
// is e4m3fn's step at |v| (normal or subnormal), the code read off the sum's bits as
// (exponent - 141) * 8 + mantissa, a NaN saturating to 0x7F.
__attribute__((target("avx2"))) inline __m256i e4m3fn_codes8(__m256 quotient) {
  const __m256i bits = _mm256_castps_si256(quotient);
  const __m256 a =
      _mm256_min_ps(_mm256_set1_ps(kFp8Max),
                    _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF))));
  const __m256i exponent =
      _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7F800000)),
                       _mm256_set1_epi32((127 - 6) << 23));
  const __m256 bias = _mm256_castsi256_ps(_mm256_add_epi32(exponent, _mm256_set1_epi32(20 << 23)));
  const __m256i f = _mm256_castps_si256(_mm256_add_ps(a, bias));
  const __m256i code = _mm256_min_epu32(
      _mm256_sub_epi32(
          _mm256_add_epi32(_mm256_srli_epi32(f, 20), _mm256_and_si256(f, _mm256_set1_epi32(0x1F))),
          _mm256_set1_epi32(141 << 3)),
      _mm256_set1_epi32(0x7F));
  return _mm256_or_si256(code,
                         _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80)));
}

}  // namespace weightcast
#endif
