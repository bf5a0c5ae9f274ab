// Deterministic test buffers for the codec suites.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/tensor_slice.h"

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

// The elements of slice `s` of a tensor of `shape` whose bytes are `full` (elements of `es`
// bytes), in the slice's local order.
inline std::vector<uint8_t> gather_slice(const std::vector<uint8_t>& full,
                                         const std::vector<int64_t>& shape, const TensorSlice& s,
                                         size_t es = 2) {
  std::vector<uint8_t> out;
  for_each_slice_run(shape, s, [&](const SliceRun& r) {
    out.insert(out.end(), full.begin() + static_cast<int64_t>(r.global * es),
               full.begin() + static_cast<int64_t>((r.global + r.count) * es));
    return true;
  });
  return out;
}

// A one-dimensional bf16 view of `bytes`.
inline TensorRef bf16_view(std::vector<uint8_t>& bytes, const std::string& name) {
  return TensorRef::contiguous(name, DType::kBF16, bytes.data(),
                               static_cast<int64_t>(bytes.size() / 2));
}

}  // namespace weightcast::testing
