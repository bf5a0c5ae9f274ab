#include "codec/fp8_quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/cpu_dispatch.h"
#include "codec/float_convert.h"
#include "codec/fp8_codes_avx2.h"
#include "codec/fp8_quantize_avx2.h"

namespace weightcast {
namespace {

constexpr uint32_t kSignBit = 0x80000000u;
constexpr uint8_t kE4m3Nan = 0x7F;
constexpr uint8_t kE4m3Max = 0x7E;         // 448: exponent 15, mantissa 6
constexpr float kE4m3MinNormal = 0x1p-6f;  // exponent field 1
constexpr float kE4m3SubnormalStep = 0x1p-9f;

// One element of `in` at element offset `at` from its base, widened to fp32 (exact).
float load_float(const TensorRef& in, int64_t at) {
  const uint8_t* p = static_cast<const uint8_t*>(in.data) + at * int64_t(in.element_size());
  switch (in.dtype) {
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return std::bit_cast<float>(uint32_t{b} << 16);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_float(h);
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

// float_to_e4m3fn for a value already clamped to [-448, 448] (or a NaN), without branches: the
// portable kernel's encoder (quantise_run_avx2 does the same on 8 lanes). The subnormal
// rounding adds and removes 2^23 (round to nearest even in the default rounding mode); the
// normal one rounds the fp32 bits.
inline uint8_t clamped_to_e4m3fn(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t sign = (bits >> 24) & 0x80u, abits = bits & ~kSignBit;
  const float a = std::bit_cast<float>(abits);
  const uint32_t rounded = (abits + (1u << 19) - 1 + ((abits >> 20) & 1u)) >> 20;
  const uint32_t normal = std::min<uint32_t>(rounded - ((127u - 7u) << 3), kE4m3Max);
  // Only a subnormal's steps are converted to an integer (a NaN or a large value would be
  // undefined behaviour there): the others take 0 and the select below drops them.
  const float small = a < kE4m3MinNormal ? a : 0.0f;
  const auto sub = static_cast<uint32_t>(
      static_cast<int32_t>((small * (1.0f / kE4m3SubnormalStep) + 0x1p23f) - 0x1p23f));
  uint32_t r = a < kE4m3MinNormal ? sub : normal;
  r = abits > 0x7F800000u ? kE4m3Nan : r;
  return static_cast<uint8_t>(sign | r);
}

// The largest finite |x| of `n` values. For non-negative floats the bit patterns order as the
// values do, so the reduction runs on integers; patterns from 0x7F800000 up are infinities and
// NaNs and count as zero.
float finite_amax_portable(const float* x, int64_t n) {
  uint32_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(x[i]) & ~kSignBit;
    best = std::max(best, a < 0x7F800000u ? a : 0u);
  }
  return std::bit_cast<float>(best);
}

// Quantises `n` widened values with the block's scale `s`.
void quantise_run_portable(const float* x, int64_t n, float s, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / s;
    v = v > kFp8Max ? kFp8Max : v;  // a NaN compares false both ways and stays one
    v = v < -kFp8Max ? -kFp8Max : v;
    out[i] = clamped_to_e4m3fn(v);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) float finite_amax_avx2(const float* x, int64_t n) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  __m256i best = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(x + i)), magnitude);
    best = _mm256_max_epu32(best, _mm256_and_si256(a, _mm256_cmpgt_epi32(inf, a)));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), best);
  float amax = finite_amax_portable(x + i, n - i);
  for (const uint32_t l : lanes) amax = std::max(amax, std::bit_cast<float>(l));
  return amax;
}

// 8 lanes at a time: the division, then the shared encoding (codec/fp8_codes_avx2.h).
__attribute__((target("avx2"))) void quantise_run_avx2(const float* x, int64_t n, float s,
                                                       uint8_t* out) {
  const __m256 scale = _mm256_set1_ps(s);
  // Byte 0 of each 32-bit lane, gathered into the low 4 bytes of each 128-bit half.
  const __m256i gather =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i codes = e4m3fn_codes8(_mm256_div_ps(_mm256_loadu_ps(x + i), scale));
    const __m256i packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(codes, gather),
                                                       _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  quantise_run_portable(x + i, n - i, s, out + i);
}
#endif

float finite_amax(const float* x, int64_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return finite_amax_avx2(x, n);
#endif
  return finite_amax_portable(x, n);
}

void quantise_run(const float* x, int64_t n, float s, uint8_t* out) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return quantise_run_avx2(x, n, s, out);
#endif
  quantise_run_portable(x, n, s, out);
}

// Row `r` of `in` (its shape[1] columns) widened to fp32 into `out`.
void load_row(const TensorRef& in, const std::vector<int64_t>& strides, int64_t r, float* out) {
  const int64_t cols = in.shape[1], base = in.offset + r * strides[0];
  if (strides[1] == 1 && in.dtype == DType::kBF16) {
    const auto* p = static_cast<const uint16_t*>(in.data) + base;
    for (int64_t c = 0; c < cols; ++c) out[c] = std::bit_cast<float>(uint32_t{p[c]} << 16);
    return;
  }
  if (strides[1] == 1 && in.dtype == DType::kF32) {
    std::memcpy(out, static_cast<const float*>(in.data) + base, size_t(cols) * 4);
    return;
  }
  for (int64_t c = 0; c < cols; ++c) out[c] = load_float(in, base + c * strides[1]);
}

}  // namespace

uint8_t float_to_e4m3fn(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint8_t>((bits & kSignBit) >> 24);
  const float a = std::fabs(x);
  if (std::isnan(a)) return sign | kE4m3Nan;
  if (a >= kFp8Max) return sign | kE4m3Max;
  if (a < kE4m3MinNormal) {
    // Subnormal (or zero): a multiple of 2^-9, rounded to nearest even; 8 steps is the
    // smallest normal, whose encoding 0x08 follows 0x07.
    return sign | static_cast<uint8_t>(std::nearbyint(a / kE4m3SubnormalStep));
  }
  // Normal: round fp32's 23-bit mantissa to 3 bits, ties to even; a carry moves into the
  // exponent, as the encodings are ordered. Then rebase the exponent from 127 to 7.
  const uint32_t abits = bits & ~kSignBit;
  const uint32_t rounded = (abits + (1u << 19) - 1 + ((abits >> 20) & 1u)) >> 20;
  const uint32_t e4m3 = rounded - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(e4m3, kE4m3Max));
}

float e4m3fn_to_float(uint8_t q) {
  const float sign = (q & 0x80) ? -1.0f : 1.0f;
  const uint32_t exp = (q >> 3) & 0xF, mant = q & 0x7;
  if (exp == 0xF && mant == 0x7) return std::copysign(std::nanf(""), sign);
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, static_cast<int>(exp) - 7);
}

Status quantize_fp8_blocks(const TensorRef& in, std::span<uint8_t> q, std::span<float> scale_inv) {
  const std::string who = "FP8 quantisation of tensor '" + in.name + "'";
  if (in.shape.size() != 2) {
    return invalid_argument(who + ": a 2-D matrix is quantised, this one has " +
                            std::to_string(in.shape.size()) + " dimensions");
  }
  if (in.dtype != DType::kBF16 && in.dtype != DType::kF16 && in.dtype != DType::kF32) {
    return invalid_argument(who + ": bf16, fp16 or fp32 is quantised, not " +
                            std::string(dtype_name(in.dtype)));
  }
  if (in.memory != MemoryKind::kHost && in.memory != MemoryKind::kHostPinned) {
    return invalid_argument(who + ": the tensor is not in host memory");
  }
  RETURN_IF_ERROR(in.validate());
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const int64_t grid_rows = fp8_scale_rows(rows), grid_cols = fp8_scale_cols(cols);
  if (q.size() != static_cast<size_t>(rows * cols) ||
      scale_inv.size() != static_cast<size_t>(grid_rows * grid_cols)) {
    return invalid_argument(who + ": outputs of " + std::to_string(q.size()) + " values and " +
                            std::to_string(scale_inv.size()) + " scales for a [" +
                            std::to_string(rows) + ", " + std::to_string(cols) + "] matrix (" +
                            std::to_string(rows * cols) + " and " +
                            std::to_string(grid_rows * grid_cols) + " needed)");
  }
  const std::vector<int64_t> strides = in.effective_strides();
  // Contiguous bf16 rows: the AVX2 kernel, which reads the bf16 lanes where they lie and
  // divides only where a table cannot give the code (fp8_quantize_avx2.h).
  if (in.dtype == DType::kBF16 && strides[1] == 1 && fp8_avx2_available()) {
    const auto* base = static_cast<const uint16_t*>(in.data) + in.offset;
    for (int64_t br = 0; br < grid_rows; ++br) {
      const int64_t r0 = br * kFp8Block, n = std::min(rows - r0, kFp8Block);
      quantize_bf16_band_avx2(base + r0 * strides[0], strides[0], n, cols, q.data() + r0 * cols,
                              scale_inv.data() + br * grid_cols);
    }
    return ok_status();
  }
  // A band of 128 rows at a time, read row by row (sequential in memory, where a block's rows
  // are a row pitch apart): one pass for the blocks' amax, one (from cache) to quantise.
  std::vector<float> row(static_cast<size_t>(cols));  // one row, widened
  std::vector<float> amax(static_cast<size_t>(grid_cols));
  for (int64_t br = 0; br < grid_rows; ++br) {
    const int64_t r0 = br * kFp8Block, r1 = std::min(rows, r0 + kFp8Block);
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
      load_row(in, strides, r, row.data());
      for (int64_t bc = 0; bc < grid_cols; ++bc) {
        const int64_t c0 = bc * kFp8Block, w = std::min(cols - c0, kFp8Block);
        amax[bc] = std::max(amax[bc], finite_amax(row.data() + c0, w));
      }
    }
    float* scales = scale_inv.data() + br * grid_cols;
    for (int64_t bc = 0; bc < grid_cols; ++bc) {
      scales[bc] = std::max(amax[bc], kFp8MinAmax) / kFp8Max;  // fp32, as the engines compute it
    }
    for (int64_t r = r0; r < r1; ++r) {
      load_row(in, strides, r, row.data());
      for (int64_t bc = 0; bc < grid_cols; ++bc) {
        const int64_t c0 = bc * kFp8Block, w = std::min(cols - c0, kFp8Block);
        quantise_run(row.data() + c0, w, scales[bc], q.data() + r * cols + c0);
      }
    }
  }
  return ok_status();
}

}  // namespace weightcast
