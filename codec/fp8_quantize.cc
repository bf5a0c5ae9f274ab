#include "codec/fp8_quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec/float_convert.h"

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
  const auto at = [&](int64_t r, int64_t c) { return in.offset + r * strides[0] + c * strides[1]; };
  for (int64_t br = 0; br < grid_rows; ++br) {
    for (int64_t bc = 0; bc < grid_cols; ++bc) {
      const int64_t r0 = br * kFp8Block, r1 = std::min(rows, r0 + kFp8Block);
      const int64_t c0 = bc * kFp8Block, c1 = std::min(cols, c0 + kFp8Block);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float a = std::fabs(load_float(in, at(r, c)));
          if (std::isfinite(a)) amax = std::max(amax, a);
        }
      }
      const float s = std::max(amax, kFp8MinAmax) / kFp8Max;  // fp32, as the engines compute it
      scale_inv[static_cast<size_t>(br * grid_cols + bc)] = s;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          float v = load_float(in, at(r, c)) / s;
          if (v > kFp8Max) v = kFp8Max;  // a NaN compares false both ways and stays one
          if (v < -kFp8Max) v = -kFp8Max;
          q[static_cast<size_t>(r * cols + c)] = float_to_e4m3fn(v);
        }
      }
    }
  }
  return ok_status();
}

}  // namespace weightcast
