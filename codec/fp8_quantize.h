// Block FP8 quantisation for FP8 engines (docs/ARCHITECTURE.md §4 "FP8"): a bf16, fp16 or fp32
// matrix [M, N] becomes float8_e4m3fn values [M, N] plus `weight_scale_inv` fp32
// [ceil(M/128), ceil(N/128)], the layout of block-FP8 checkpoints (vLLM's loader, DeepGEMM).
//
// Per 128 x 128 block (ragged at the right and bottom edges):
//   s = max(amax, 1e-4) / 448            in fp32; amax over the block's finite |x|
//   q = e4m3fn(clamp(x / s, -448, 448))   the division in fp32, round to nearest, ties to even
//   weight_scale_inv = s                  so that x ~= q * s
// Non-finite inputs (docs/DECISIONS.md "FP8 quantiser"): a NaN stays a NaN of its sign
// (0x7F / 0xFF) and leaves amax alone; +-inf leaves amax alone and saturates to +-448.
#pragma once

#include <cstdint>
#include <span>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"

namespace weightcast {

inline constexpr int64_t kFp8Block = 128;
inline constexpr float kFp8Max = 448.0f;
inline constexpr float kFp8MinAmax = 1e-4f;

// fp32 -> float8_e4m3fn bits, round to nearest, ties to even; finite values beyond +-448
// saturate to +-448 (e4m3fn has no infinity), a NaN is 0x7F with x's sign.
uint8_t float_to_e4m3fn(float x);
// float8_e4m3fn bits -> fp32, exact.
float e4m3fn_to_float(uint8_t q);

// The scale grid of an [rows, cols] matrix: ceil(rows / 128) x ceil(cols / 128).
constexpr int64_t fp8_scale_rows(int64_t rows) {
  return (rows + kFp8Block - 1) / kFp8Block;
}
constexpr int64_t fp8_scale_cols(int64_t cols) {
  return (cols + kFp8Block - 1) / kFp8Block;
}

// Quantises the 2-D host view `in` (bf16, fp16 or fp32; any strides, e.g. one half of a packed
// gate_up parameter) into `q` (rows * cols bytes, row-major) and `scale_inv`
// (fp8_scale_rows * fp8_scale_cols floats, row-major). kInvalidArgument names the tensor when
// it is not 2-D, not a float dtype, not on the host, or the outputs have the wrong size.
[[nodiscard]] Status quantize_fp8_blocks(const TensorRef& in, std::span<uint8_t> q,
                                         std::span<float> scale_inv);

}  // namespace weightcast
