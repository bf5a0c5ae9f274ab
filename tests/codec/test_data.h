// Deterministic test buffers for the codec suites.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"

namespace weightcast::testing {

inline std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

// A copy of `base` where about `density` of the elements move by a small signed step (like an
// optimizer update), and a few by a large one (like a sign flip).
inline std::vector<uint8_t> perturb(const std::vector<uint8_t>& base, size_t es, double density,
                                    uint64_t seed) {
  std::vector<uint8_t> out = base;
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution pick(density);
  std::uniform_int_distribution<int> small(-3, 3);
  const size_t n = base.size() / es;
  for (size_t i = 0; i < n; ++i) {
    if (!pick(rng)) continue;
    uint32_t v = 0;
    std::memcpy(&v, out.data() + i * es, es);
    int step = small(rng);
    if (step == 0) step = 1;
    if (rng() % 50 == 0)
      v ^= 1u << (es * 8 - 1);  // sign flip
    else
      v += static_cast<uint32_t>(step);
    std::memcpy(out.data() + i * es, &v, es);
  }
  return out;
}

inline Result<EncodedDelta> encode(const std::vector<uint8_t>& old_bytes,
                                   const std::vector<uint8_t>& new_bytes, DType dtype,
                                   uint32_t chunk = kDefaultChunkElements,
                                   uint32_t modes = kAllowAllModes) {
  EncodeOptions o;
  o.name = "t";
  o.dtype = dtype;
  o.chunk_elements = chunk;
  o.allowed_modes = modes;
  return encode_delta(old_bytes, new_bytes, o);
}

inline TensorRef view_of(std::vector<uint8_t>& bytes, DType dtype) {
  return TensorRef::contiguous("dest", dtype, bytes.data(),
                               static_cast<int64_t>(bytes.size() / dtype_size(dtype)));
}

}  // namespace weightcast::testing
