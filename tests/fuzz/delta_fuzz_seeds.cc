// Writes seed inputs for the delta fuzz target: valid records in every chunk mode, dtype and
// a few shapes. `delta_fuzz_seeds DIR` fills DIR; the smoke driver calls make_delta_seeds().
#include "tests/fuzz/delta_fuzz_seeds.h"

#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "codec/delta_encoder.h"

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_delta_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  std::mt19937_64 rng(2026);
  for (DType dtype : {DType::kF8E4M3FN, DType::kBF16, DType::kF32}) {
    const size_t es = dtype_size(dtype);
    for (uint32_t modes : {uint32_t{kAllowRice}, uint32_t{kAllowStreamVByte},
                           uint32_t{kAllowBitmap}, uint32_t{kAllowRaw}, uint32_t{kAllowAllModes}}) {
      for (size_t n : {size_t{1}, size_t{200}, size_t{1000}}) {
        std::vector<uint8_t> a(n * es), b;
        for (size_t i = 0; i < a.size(); ++i) a[i] = fuzz_base_byte(i);
        b = a;
        for (size_t i = 0; i < n; ++i) {
          if (rng() % 8 == 0 || n == 1) b[i * es] += static_cast<uint8_t>(1 + rng() % 3);
          if (rng() % 64 == 0) b[i * es + es - 1] ^= 0x80;
        }
        EncodeOptions o;
        o.name = "seed";
        o.dtype = dtype;
        o.chunk_elements = 128;
        o.allowed_modes = modes;
        auto enc = encode_delta(a, b, o);
        if (enc.ok()) seeds.push_back(enc->record);
      }
    }
  }
  return seeds;
}

}  // namespace weightcast::fuzzing
