#include "codec/fp8_quantize_avx512.h"

#include <algorithm>
#include <bit>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/cpu_dispatch.h"
#include "codec/fp8_quantize.h"

namespace weightcast {

bool fp8_avx512_available() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = cpu_has_avx512bw() && __builtin_cpu_supports("avx512vl");
  return has;
#else
  return false;
#endif
}

#if defined(__x86_64__)
// GCC 12 reports the AVX-512 intrinsics' own undefined pass-through operands as
// -W(maybe-)uninitialized (GCC bug 105593, fixed in GCC 13); nothing of this file's is.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
namespace {

// One block's running amax, 32 lanes of 16-bit patterns.
struct alignas(64) AmaxLanes {
  uint16_t lanes[32];
};

// A mask of the first `n` (0..32) lanes.
inline __mmask32 first_lanes32(int64_t n) {
  return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
}
inline __mmask16 first_lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// The 16-bit magnitude patterns of finite bf16 values order as the values do: amax is an
// unsigned max over them, infinities and NaNs (0x7F80 and up) left out.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void band_amax(const uint16_t* first,
                                                                    int64_t pitch, int64_t rows,
                                                                    int64_t cols, AmaxLanes* acc,
                                                                    int64_t blocks) {
  const __m512i magnitude = _mm512_set1_epi16(0x7FFF), inf = _mm512_set1_epi16(0x7F80);
  for (int64_t b = 0; b < blocks; ++b) _mm512_store_si512(acc[b].lanes, _mm512_setzero_si512());
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = first + r * pitch;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kFp8Block, w = std::min(cols - c0, kFp8Block);
      __m512i best = _mm512_load_si512(acc[b].lanes);
      for (int64_t k = 0; k < w; k += 32) {
        const __m512i x = _mm512_maskz_loadu_epi16(first_lanes32(w - k), row + c0 + k);
        const __m512i a = _mm512_and_si512(x, magnitude);
        best = _mm512_mask_max_epu16(best, _mm512_cmplt_epu16_mask(a, inf), best, a);
      }
      _mm512_store_si512(acc[b].lanes, best);
    }
  }
}

float reduce_amax(const AmaxLanes& acc) {
  uint16_t best = 0;
  for (const uint16_t l : acc.lanes) best = std::max(best, l);
  return std::bit_cast<float>(uint32_t{best} << 16);
}

// 16 values. The e4m3fn code of |v| (v = x / s clamped to 448) comes from one fp32 addition:
// B = 2^(max(e, -6) + 20), e the exponent of |v|, has an ulp of 2^(max(e, -6) - 3), the step of
// e4m3fn at |v| (normal or subnormal), so RN(|v| + B) rounds |v| to its code, ties to even, and
// holds it as exponent field X and mantissa k: code = (X - 141) * 8 + k. A NaN stays a NaN
// through the addition and its code saturates to 0x7F; the same arithmetic as the portable
// and AVX2 kernels, checked bit for bit against them and against ml_dtypes.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i codes16(__m512i x16,
                                                                            __m512 scale) {
  const __m512 v = _mm512_div_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x16, 16)), scale);
  const __m512i bits = _mm512_castps_si512(v);
  // MINPS returns its second operand when one is a NaN: a NaN goes through, +-inf becomes 448.
  const __m512 a =
      _mm512_min_ps(_mm512_set1_ps(kFp8Max),
                    _mm512_castsi512_ps(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF))));
  const __m512i exponent =
      _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7F800000)),
                       _mm512_set1_epi32((127 - 6) << 23));
  const __m512 bias = _mm512_castsi512_ps(_mm512_add_epi32(exponent, _mm512_set1_epi32(20 << 23)));
  const __m512i f = _mm512_castps_si512(_mm512_add_ps(a, bias));
  const __m512i code = _mm512_min_epu32(
      _mm512_sub_epi32(
          _mm512_add_epi32(_mm512_srli_epi32(f, 20), _mm512_and_si512(f, _mm512_set1_epi32(0x1F))),
          _mm512_set1_epi32(141 << 3)),
      _mm512_set1_epi32(0x7F));
  // code | (bits >> 24 & 0x80): the sign into bit 7.
  return _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80),
                                   0xF8);
}

// The first `lanes` of 16 values (a ragged block's last ones).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantise16(const uint16_t* in,
                                                                     __mmask16 lanes, __m512 scale,
                                                                     uint8_t* out) {
  const __m512i x16 = _mm512_maskz_cvtepu16_epi32(lanes, _mm256_maskz_loadu_epi16(lanes, in));
  _mm512_mask_cvtepi32_storeu_epi8(out, lanes, codes16(x16, scale));
}

// 64 values: four code vectors packed to bytes by two saturating packs (the codes are 0..255)
// and put back in order by one permutation, as each pack works within 128-bit lanes.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantise64(const uint16_t* in,
                                                                     __m512 scale, uint8_t* out) {
  __m512i c[4];
  for (int t = 0; t < 4; ++t) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 16 * t));
    c[t] = codes16(_mm512_maskz_cvtepu16_epi32(0xFFFF, raw), scale);
  }
  const __m512i packed =
      _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
  // Lane j of `packed` holds 4 bytes of each of c[0..3]; dword 4 t + j of the output is c[t]'s.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi32(order, packed));
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_bf16_band_avx512(
    const uint16_t* first, int64_t pitch, int64_t rows, int64_t cols, uint8_t* q, float* scales) {
  // Up to 32 blocks (4096 columns) of the band at a time, so the amax lanes fit on the stack:
  // read once for the amax of their blocks, then again to quantise them. (Narrower chunks,
  // meant to keep the second read in L2, ran slower: docs/PERFORMANCE.md.)
  constexpr int64_t kChunkBlocks = 32;
  const int64_t blocks = fp8_scale_cols(cols);
  for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int64_t nb = std::min(kChunkBlocks, blocks - b0), c0 = b0 * kFp8Block;
    const int64_t width = std::min(cols - c0, nb * kFp8Block);
    AmaxLanes acc[kChunkBlocks];
    band_amax(first + c0, pitch, rows, width, acc, nb);
    for (int64_t b = 0; b < nb; ++b) {
      scales[b0 + b] = std::max(reduce_amax(acc[b]), kFp8MinAmax) / kFp8Max;  // fp32
    }
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = first + r * pitch + c0;
      uint8_t* out = q + r * cols + c0;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = b * kFp8Block, w = std::min(width - at, kFp8Block);
        const __m512 scale = _mm512_set1_ps(scales[b0 + b]);
        if (w == kFp8Block) {
          quantise64(row + at, scale, out + at);
          quantise64(row + at + 64, scale, out + at + 64);
          continue;
        }
        for (int64_t k = 0; k < w; k += 16) {
          quantise16(row + at + k, first_lanes16(w - k), scale, out + at + k);
        }
      }
    }
  }
}

#else

void quantize_bf16_band_avx512(const uint16_t*, int64_t, int64_t, int64_t, uint8_t*, float*) {}

#endif

}  // namespace weightcast
