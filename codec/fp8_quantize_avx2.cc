#include "codec/fp8_quantize_avx2.h"

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/cpu_dispatch.h"
#include "codec/fp8_codes_avx2.h"
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

// The largest magnitude of a block's `w` (1..128) values in row `row`, folded into the 16
// lanes of `best` as 16-bit patterns (bf16 magnitudes order as their values do). With
// kFinite, patterns from 0x7F80 up (infinities and NaNs) count as zero: the second pass over a
// block whose plain amax is not finite (signed 16-bit compares are exact, magnitudes being at
// most 0x7FFF).
template <bool kFinite>
__attribute__((target("avx2"))) inline __m256i fold16(__m256i best, __m256i x) {
  const __m256i a = _mm256_and_si256(x, _mm256_set1_epi16(0x7FFF));
  if (!kFinite) return _mm256_max_epu16(best, a);
  return _mm256_max_epu16(best,
                          _mm256_and_si256(a, _mm256_cmpgt_epi16(_mm256_set1_epi16(0x7F80), a)));
}

template <bool kFinite>
__attribute__((target("avx2"))) inline __m256i fold_amax(__m256i best, const uint16_t* row,
                                                         int64_t w) {
  int64_t k = 0;
  for (; k + 16 <= w; k += 16) {
    best = fold16<kFinite>(best, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k)));
  }
  if (k < w) {  // a ragged block's last values, through a zero-padded copy
    alignas(32) uint16_t tail[16] = {};
    std::memcpy(tail, row + k, static_cast<size_t>(w - k) * 2);
    best = fold16<kFinite>(best, _mm256_load_si256(reinterpret_cast<const __m256i*>(tail)));
  }
  return best;
}

__attribute__((target("avx2"))) uint16_t reduce_amax(__m256i lanes) {
  alignas(32) uint16_t l[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), lanes);
  return *std::max_element(l, l + 16);
}

// 8 bf16 values to their e4m3fn codes (one per 32-bit lane, sign in bit 7), by the division.
__attribute__((target("avx2"))) inline __m256i codes8(__m128i x8, __m256 scale) {
  const __m256i widened = _mm256_slli_epi32(_mm256_cvtepu16_epi32(x8), 16);
  return e4m3fn_codes8(_mm256_div_ps(_mm256_castsi256_ps(widened), scale));
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
// subnormals, zeros, bf16 subnormals, infinities and NaNs) are divided.
//
// In bytes, 32 values at a time: T rises by at most one per k and by at most 8 over the 128
// of them, with steps more than 8 apart in k, so T[k] = T[16 h] + (k >= F[h]) + (k >= S[h]),
// h = k >> 4, F and S the (at most two) steps in 16 h .. 16 h + 15: three 16-entry lookups.
// Below exponent E0 (the least E whose code can be 8) every code is under 8; from E0 + 16 on
// every code saturates. So with t = min(E - E0, 16), code = 8 t + (8 E0 + T[k]), 0..208, and
// 8 E0 + T[0] is 0..72.
struct alignas(32) BlockCodes {
  bool usable = false;    // false: a table that does not fit (never seen), the block is divided
  __m256i e0;             // E0 in every byte
  __m256i d_max;          // 254 - E0 in every byte: the largest E - E0 of a finite value
  __m256i start;          // 8 E0 + T[16 h] at byte h (h = k >> 4), both 128-bit lanes
  __m256i first, second;  // F[h] - 1 and S[h] - 1 at byte h (127: no such step)
};

__attribute__((target("avx2"))) BlockCodes block_codes(float s) {
  int32_t t[128];
  for (uint32_t k = 0; k < 128; ++k) {
    const uint32_t q = std::bit_cast<uint32_t>(std::bit_cast<float>((127u << 23) | (k << 16)) / s);
    const uint32_t rounded = (q + (1u << 19) - 1 + ((q >> 20) & 1u)) >> 20;  // as the encoder
    t[k] = static_cast<int32_t>(rounded) - ((127 - 7) << 3) - 8 * 127;
  }
  BlockCodes c;
  // E0: the least E >= 1 with 8 E + T[0] + 8 >= 8.
  const int32_t e0 = std::max(1, (7 - t[0]) / 8);  // ceil(-T[0] / 8) where that is positive
  const int32_t r0 = 8 * e0 + t[0];
  if (r0 < 0 || r0 > 72 || t[127] - t[0] > 8) return c;
  alignas(32) int8_t start[32] = {}, first[32], second[32];
  for (int h = 0; h < 8; ++h) {
    int steps[2] = {16, 16}, n = 0;
    for (int lo = 1; lo < 16; ++lo) {
      const int32_t rise = t[16 * h + lo] - t[16 * h + lo - 1];
      if (rise < 0 || rise > 1 || (rise == 1 && n == 2)) return c;
      if (rise == 1) steps[n++] = lo;
    }
    for (int lane = 0; lane < 2; ++lane) {
      start[16 * lane + h] = static_cast<int8_t>(r0 + t[16 * h] - t[0]);
      first[16 * lane + h] = static_cast<int8_t>(16 * h + steps[0] - 1);
      second[16 * lane + h] = static_cast<int8_t>(16 * h + steps[1] - 1);
    }
  }
  for (int h = 8; h < 16; ++h) {  // k >> 4 is at most 7; these entries are never read
    first[h] = first[16 + h] = second[h] = second[16 + h] = 127;
  }
  c.e0 = _mm256_set1_epi8(static_cast<int8_t>(e0));
  c.d_max = _mm256_set1_epi8(static_cast<int8_t>(254 - e0));
  c.start = _mm256_load_si256(reinterpret_cast<const __m256i*>(start));
  c.first = _mm256_load_si256(reinterpret_cast<const __m256i*>(first));
  c.second = _mm256_load_si256(reinterpret_cast<const __m256i*>(second));
  c.usable = true;
  return c;
}

// The bytes of 16-bit lanes a and b, in the lane-interleaved order of packus (fixed by one
// permutation at the store).
__attribute__((target("avx2"))) inline __m256i bytes_of(__m256i a, __m256i b) {
  return _mm256_packus_epi16(a, b);
}

// 32 values: 8 t + start + steps where that is a normal code, the division elsewhere.
__attribute__((target("avx2"))) inline void quantise32(const uint16_t* in, const BlockCodes& c,
                                                       __m256 scale, uint8_t* out) {
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 16));
  __m256i r;
  if (!c.usable) {
    r = bytes_of(divided16(in, scale), divided16(in + 16, scale));
  } else {
    // Each value's low bytes (exponent bit 0, mantissa) and high bytes (sign, exponent bits
    // 1-7), in packus's lane-interleaved order: one shuffle per vector and two unpacks.
    const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                                           2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m256i s0 = _mm256_shuffle_epi8(x0, split), s1 = _mm256_shuffle_epi8(x1, split);
    const __m256i low = _mm256_unpacklo_epi64(s0, s1), high = _mm256_unpackhi_epi64(s0, s1);
    // E = high << 1 (the sign bit falls off) plus the top bit of the low byte.
    const __m256i e = _mm256_sub_epi8(_mm256_add_epi8(high, high),
                                      _mm256_cmpgt_epi8(_mm256_setzero_si256(), low));
    const __m256i k = _mm256_and_si256(low, _mm256_set1_epi8(0x7F));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(k, 4), _mm256_set1_epi8(0x0F));
    __m256i rest = _mm256_shuffle_epi8(c.start, hi);
    rest = _mm256_sub_epi8(rest, _mm256_cmpgt_epi8(k, _mm256_shuffle_epi8(c.first, hi)));
    rest = _mm256_sub_epi8(rest, _mm256_cmpgt_epi8(k, _mm256_shuffle_epi8(c.second, hi)));
    // d = E - E0, wrapping: E0..254 are d = 0..254 - E0, every other E (0, under E0, 255) more.
    const __m256i d = _mm256_sub_epi8(e, c.e0);
    const __m256i t = _mm256_min_epu8(d, _mm256_set1_epi8(16));
    const __m256i code = _mm256_add_epi8(_mm256_slli_epi16(t, 3), rest);  // 8 t <= 128: no spill
    const __m256i valid =
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_min_epu8(d, c.d_max), d),
                         _mm256_cmpeq_epi8(_mm256_max_epu8(code, _mm256_set1_epi8(8)), code));
    const __m256i sign = _mm256_and_si256(high, _mm256_set1_epi8(static_cast<char>(0x80)));
    r = _mm256_or_si256(_mm256_min_epu8(code, _mm256_set1_epi8(0x7E)), sign);
    if (_mm256_movemask_epi8(valid) != -1) {
      r = _mm256_blendv_epi8(bytes_of(divided16(in, scale), divided16(in + 16, scale)), r, valid);
    }
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(r, 0xD8));
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
  const uintptr_t ahead_bytes = static_cast<uintptr_t>(kFp8Block * pitch) * 2;
  for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int64_t nb = std::min(kChunkBlocks, blocks - b0), c0 = b0 * kFp8Block;
    const int64_t width = std::min(cols - c0, nb * kFp8Block);
    __m256i acc[kChunkBlocks];
    for (int64_t b = 0; b < nb; ++b) acc[b] = _mm256_setzero_si256();
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = first + r * pitch + c0;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = b * kFp8Block;
        acc[b] = fold_amax<false>(acc[b], row + at, std::min(width - at, kFp8Block));
      }
    }
    BlockCodes codes[kChunkBlocks];
    for (int64_t b = 0; b < nb; ++b) {
      uint16_t amax = reduce_amax(acc[b]);
      if (amax >= 0x7F80) {  // an infinity or NaN in the block: its finite amax, by a second pass
        const int64_t at = b * kFp8Block, w = std::min(width - at, kFp8Block);
        __m256i finite = _mm256_setzero_si256();
        for (int64_t r = 0; r < rows; ++r)
          finite = fold_amax<true>(finite, first + r * pitch + c0 + at, w);
        amax = reduce_amax(finite);
      }
      const float amax_value = std::bit_cast<float>(uint32_t{amax} << 16);
      scales[b0 + b] = std::max(amax_value, kFp8MinAmax) / kFp8Max;  // fp32
      codes[b] = block_codes(scales[b0 + b]);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = first + r * pitch + c0;
      uint8_t* out = q + r * cols + c0;
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = b * kFp8Block, w = std::min(width - at, kFp8Block);
        const __m256 scale = _mm256_set1_ps(scales[b0 + b]);
        int64_t k = 0;
        for (; k + 32 <= w; k += 32) {
          // The same columns a band further on, which the next amax pass reads: fetched
          // while this one computes (a hint; past the matrix it is dropped).
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(row + at + k) +
                                                     ahead_bytes),
                       _MM_HINT_T2);
          quantise32(row + at + k, codes[b], scale, out + at + k);
        }
        if (k < w) quantise_tail(row + at + k, w - k, codes[b], scale, out + at + k);
      }
    }
  }
}

#else

void quantize_bf16_band_avx2(const uint16_t*, int64_t, int64_t, int64_t, uint8_t*, float*) {}

#endif

}  // namespace weightcast
