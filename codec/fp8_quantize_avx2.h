// The AVX2 kernel of codec/fp8_quantize.h for contiguous bf16 rows (a whole matrix, or a column
// half of a packed parameter), the AVX-512 kernel's structure on 256-bit vectors: each block's
// amax on the 16-bit patterns where they lie (16 per instruction, no widened row copy), then
// 32 values at a time widened, divided by the block's scale in fp32 and encoded, packed to
// bytes in registers. Same results, bit for bit, as the portable and AVX-512 kernels (the
// codec tests run every kernel, WEIGHTCAST_NO_AVX512 selecting this one on AVX-512 hosts).
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
