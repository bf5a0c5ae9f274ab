// Seeds for the GPU chunk decoder's fuzz target: encode_chunk output for every mode and
// element size at a few densities, behind the target's parameter bytes.
#include "tests/fuzz/chunk_hd_fuzz_seeds.h"

#include <random>

#include "codec/delta_chunk.h"

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_chunk_hd_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  std::mt19937_64 rng(808);
  const uint32_t modes[] = {kAllowRice, kAllowStreamVByte, kAllowBitmap, kAllowRaw, kAllowAllModes};
  for (uint8_t selector = 0; selector < 3; ++selector) {
    const size_t es = selector == 0 ? 1 : selector == 1 ? 2 : 4;
    const uint8_t blocks = 4;  // 256 elements
    const uint32_t length = blocks * 64u;
    for (double density : {0.02, 0.3}) {
      std::vector<uint8_t> o(length * es), n;
      for (auto& b : o) b = static_cast<uint8_t>(rng());
      n = o;
      for (uint32_t i = 0; i < length; ++i) {
        if (std::uniform_real_distribution<double>(0, 1)(rng) >= density) continue;
        n[i * es] = static_cast<uint8_t>(n[i * es] + 1 + rng() % 3);
        if (rng() % 8 == 0) n[i * es + es - 1] ^= 0x80;
      }
      for (uint32_t mask : modes) {
        ChunkScratch scratch;
        EncodedChunk enc;
        encode_chunk(o.data(), n.data(), length, es, 0, mask, scratch, &enc);
        if (enc.bytes.empty()) continue;
        std::vector<uint8_t> seed = {selector, blocks};
        seed.insert(seed.end(), enc.bytes.begin(), enc.bytes.end());
        seeds.push_back(std::move(seed));
      }
    }
  }
  return seeds;
}

}  // namespace weightcast::fuzzing
