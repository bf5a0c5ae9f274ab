// The AVX-512 kernel of codec/fp8_quantize.h for the common case, bf16 rows that are contiguous
// (a whole matrix, or a column half of a packed parameter): it reads the bf16 lanes where they
// lie, with no widened row copy, takes each block's amax on the 16-bit patterns (32 per
// instruction) and quantises 16 elements per instruction. Same results, bit for bit, as the
// portable and AVX2 kernels (codec tests run all three).
#pragma once

#include <cstdint>

namespace weightcast {

// Whether the kernel may run here (AVX-512 F, BW and VL; WEIGHTCAST_NO_AVX512 turns it off).
bool fp8_avx512_available();

// One band of `rows` (1..128) rows of `cols` bf16 values, row r at first + r * pitch: the
// values into q (rows x cols, row-major, pitch cols) and each block's scale into
// scales[0 .. ceil(cols / 128)).
void quantize_bf16_band_avx512(const uint16_t* first, int64_t pitch, int64_t rows, int64_t cols,
                               uint8_t* q, float* scales);

}  // namespace weightcast
