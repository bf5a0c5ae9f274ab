// The kernel of codec/fp8_quantize.h for contiguous bf16 rows (a whole matrix, or a column
// half of a packed parameter), on AVX2: each block's amax on the 16-bit patterns where they
// lie (16 per instruction, no widened row copy), then 32 values at a time with no division:
// a value's code is 8 E + T[k] (E its exponent, k its 7 mantissa bits) from a per-block table
// of the 128 mantissas, where that code is a normal e4m3fn one; the others (e4m3fn subnormals,
// zeros, non-finite values) are divided. Same results, bit for bit, as the portable kernel
// (the codec tests run both, WEIGHTCAST_NO_AVX2 selecting the portable one). The reasoning is
// at block_codes in the .cc; the figures in docs/PERFORMANCE.md "FP8 block quantiser".
#pragma once

#include <cstdint>

namespace weightcast {

// Whether the kernel may run here (AVX2; WEIGHTCAST_NO_AVX2 turns it off).
bool fp8_avx2_available();

// One band of `rows` (1..128) rows of `cols` bf16 values, row r at first + r * pitch: the
// values into q (rows x cols, row-major, pitch cols) and each block's scale into
// scales[0 .. ceil(cols / 128)).
void quantize_bf16_band_avx2(const uint16_t* first, int64_t pitch, int64_t rows, int64_t cols,
                             uint8_t* q, float* scales);

}  // namespace weightcast
