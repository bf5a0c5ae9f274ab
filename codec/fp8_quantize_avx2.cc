#include "codec/fp8_quantize_avx2.h"

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/cpu_dispatch.h"
#include "codec/fp8_quantize.h"

namespace weightcast {

bool fp8_avx2_available() {
#if defined(__x86_64__)
  return cpu_has_avx2();
#else
  return false;
#endif
}

#if defined(__x86_64__)
namespace {

// Up to this many blocks (4096 columns) of a band at a time: their amax lanes stay on the
// stack, and the second read of their rows (to quantise) comes from cache.
constexpr int64_t kChunkBlocks = 32;

// The largest finite magnitude of a block's `w` (1..128) values in row `row`, folded into the
// 16 lanes of `best` (16-bit patterns: finite bf16 magnitudes order as their values do, and
// patterns from 0x7F80 up, infinities and NaNs, count as zero). Signed 16-bit compares are
// exact here as magnitudes are at most 0x7FFF.
__attribute__((target("avx2"))) inline __m256i fold_amax(__m256i best, const uint16_t* row,
                                                         int64_t w) {
  const __m256i magnitude = _mm256_set1_epi16(0x7FFF), inf = _mm256_set1_epi16(0x7F80);
  int64_t k = 0;
  for (; k + 16 <= w; k += 16) {
    const __m256i a =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k)), magnitude);
    best = _mm256_max_epu16(best, _mm256_and_si256(a, _mm256_cmpgt_epi16(inf, a)));
  }
  if (k < w) {  // a ragged block's last values, through a zero-padded copy
    alignas(32) uint16_t tail[16] = {};
    std::memcpy(tail, row + k, static_cast<size_t>(w - k) * 2);
    const __m256i a =
        _mm256_and_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(tail)), magnitude);
    best = _mm256_max_epu16(best, _mm256_and_si256(a, _mm256_cmpgt_epi16(inf, a)));
  }
  return best;
}

__attribute__((target("avx2"))) float reduce_amax(__m256i lanes) {
  alignas(32) uint16_t l[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), lanes);
  const uint16_t best = *std::max_element(l, l + 16);
  return std::bit_cast<float>(uint32_t{best} << 16);
}

// 8 bf16 values to their e4m3fn codes (one per 32-bit lane, sign in bit 7): the division in
// fp32, then the AVX-512 kernel's encoding (codec/fp8_quantize_avx512.cc, codes16): |v| clamped
// to 448 by a MINPS that lets a NaN through, rounded to its e4m3fn step by one fp32 addition
// of 2^(max(e, -6) + 20), the code read off the sum's bits, a NaN saturating to 0x7F.
__attribute__((target("avx2"))) inline __m256i codes8(__m128i x8, __m256 scale) {
  const __m256 v =
      _mm256_div_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x8), 16)), scale);
  const __m256i bits = _mm256_castps_si256(v);
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

// The codes of 16 values by division (codes8 twice), as 16-bit lanes in order.
__attribute__((target("avx2"))) inline __m256i divided16(const uint16_t* in, __m256 scale) {
  const __m256i lo = codes8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)), scale);
  const __m256i hi = codes8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 8)), scale);
  // packus works within 128-bit lanes: [lo 0-3, hi 0-3 | lo 4-7, hi 4-7], reordered by qword.
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}

// A block's codes without a division per value. A bf16 magnitude is m_k 2^(E - 127), m_k =
// 1 + k / 128 (E its exponent field, 1..254, k its 7 mantissa bits); the correctly rounded fp32
// quotient by the block's scale scales exactly by powers of two while it stays normal, and an
// e4m3fn code of a normal value grows by 8 per binade (a rounding carry just increments it), so
// code(x / s) = 8 E + T[k], with T[k] the code (unsaturated, any exponent) of fl32(m_k / s)
// less 8 * 127. That holds where the code is 8 or more (the quotient rounds to e4m3fn's normal
// range, where its rounding and the subnormal one agree); the other values (e4m3fn
// subnormals, zeros, bf16 subnormals, infinities and NaNs) are divided. T rises by at most one
// per k and by at most 8 over the 128 of them, so it is T[0] plus the number of its 8 steps at
// or below k: 8 compares, no table lookup (AVX2 has no 128-entry one).
struct alignas(32) BlockCodes {
  __m256i base;     // T[0] in every 16-bit lane
  __m256i step[8];  // k > step[j] (the k where T reaches T[0] + j + 1, less one; 127: never)
};

__attribute__((target("avx2"))) BlockCodes block_codes(float s) {
  int16_t t[128];
  for (uint32_t k = 0; k < 128; ++k) {
    const uint32_t q = std::bit_cast<uint32_t>(std::bit_cast<float>((127u << 23) | (k << 16)) / s);
    const uint32_t rounded = (q + (1u << 19) - 1 + ((q >> 20) & 1u)) >> 20;  // as the encoder
    t[k] = static_cast<int16_t>(static_cast<int32_t>(rounded) - ((127 - 7) << 3) - 8 * 127);
  }
  BlockCodes c;
  c.base = _mm256_set1_epi16(t[0]);
  for (int j = 0; j < 8; ++j) {
    int k = 0;
    while (k < 128 && t[k] < t[0] + j + 1) ++k;
    c.step[j] = _mm256_set1_epi16(static_cast<int16_t>(k - 1));
  }
  return c;
}

// 16 values' codes as 16-bit lanes: 8 E + T[k] where that is a normal code, the division
// elsewhere.
__attribute__((target("avx2"))) inline __m256i codes16(const uint16_t* in, const BlockCodes& c,
                                                       __m256 scale) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
  const __m256i a = _mm256_and_si256(x, _mm256_set1_epi16(0x7FFF));
  const __m256i e = _mm256_srli_epi16(a, 7), k = _mm256_and_si256(a, _mm256_set1_epi16(0x7F));
  __m256i code = _mm256_add_epi16(_mm256_slli_epi16(e, 3), c.base);
  for (int j = 0; j < 8; ++j) code = _mm256_sub_epi16(code, _mm256_cmpgt_epi16(k, c.step[j]));
  const __m256i valid =
      _mm256_and_si256(_mm256_cmpgt_epi16(code, _mm256_set1_epi16(7)),
                       _mm256_and_si256(_mm256_cmpgt_epi16(e, _mm256_setzero_si256()),
                                        _mm256_cmpgt_epi16(_mm256_set1_epi16(255), e)));
  const __m256i r =
      _mm256_or_si256(_mm256_min_epi16(code, _mm256_set1_epi16(0x7E)),
                      _mm256_and_si256(_mm256_srli_epi16(x, 8), _mm256_set1_epi16(0x80)));
  if (_mm256_movemask_epi8(valid) == -1) return r;
  return _mm256_blendv_epi8(divided16(in, scale), r, valid);
}

// 32 values: two code vectors packed to bytes (the codes are 0..255) and put back in order.
__attribute__((target("avx2"))) inline void quantise32(const uint16_t* in, const BlockCodes& c,
                                                       __m256 scale, uint8_t* out) {
  const __m256i packed = _mm256_packus_epi16(codes16(in, c, scale), codes16(in + 16, c, scale));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(packed, 0xD8));
}

// The first `n` (1..31) of 32 values, through zero-padded copies.
__attribute__((target("avx2"))) void quantise_tail(const uint16_t* in, int64_t n,
                                                   const BlockCodes& c, __m256 scale,
                                                   uint8_t* out) {
  alignas(32) uint16_t x[32] = {};
  alignas(32) uint8_t q[32];
  std::memcpy(x, in, static_cast<size_t>(n) * 2);
  quantise32(x, c, scale, q);
  std::memcpy(out, q, static_cast<size_t>(n));
}

}  // namespace

__attribute__((target("avx2"))) void quantize_bf16_band_avx2(const uint16_t* first, int64_t pitch,
                                                             int64_t rows, int64_t cols, uint8_t* q,
                                                             float* scales) {
  const int64_t blocks = fp8_scale_cols(cols);
  for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int64_t nb = std::min(kChunkBlocks, blocks - b0), c0 = b0 * kFp8Block;
    const int64_t width = std::min(cols - c0, nb * kFp8Block);
    __m256i acc[kChunkBlocks];
    for (int64_t b = 0; b < nb; ++b) acc[b] = _mm256_setzero_si256();
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = first + r * pitch + c0;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = b * kFp8Block;
        acc[b] = fold_amax(acc[b], row + at, std::min(width - at, kFp8Block));
      }
    }
    BlockCodes codes[kChunkBlocks];
    for (int64_t b = 0; b < nb; ++b) {
      scales[b0 + b] = std::max(reduce_amax(acc[b]), kFp8MinAmax) / kFp8Max;  // fp32
      codes[b] = block_codes(scales[b0 + b]);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = first + r * pitch + c0;
      uint8_t* out = q + r * cols + c0;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = b * kFp8Block, w = std::min(width - at, kFp8Block);
        const __m256 scale = _mm256_set1_ps(scales[b0 + b]);
        int64_t k = 0;
        for (; k + 32 <= w; k += 32) quantise32(row + at + k, codes[b], scale, out + at + k);
        if (k < w) quantise_tail(row + at + k, w - k, codes[b], scale, out + at + k);
      }
    }
  }
}

#else

void quantize_bf16_band_avx2(const uint16_t*, int64_t, int64_t, int64_t, uint8_t*, float*) {}

#endif

}  // namespace weightcast
