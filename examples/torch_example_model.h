// The tiny language model of the libtorch examples (weightcast_torch_trainer and
// weightcast_torch_engine): its served bf16 weights, allocated by the same code on both
// sides so every published tensor name, dtype and shape matches.
//
// The attention projection is one packed parameter qkv_packed [dim, 3 * dim] (input-major,
// as fused kernels keep it) published as three strided column blocks attn.q / attn.k /
// attn.v (strides {3 * dim, 1}, offsets 0, dim, 2 * dim): the endpoint reads and writes the
// views in place, never a contiguous copy.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace weightcast::examples {

struct ModelShape {
  int64_t vocab = 256;
  int64_t dim = 64;
};

// What an engine serves and a trainer publishes: bf16 tensors on the CPU.
struct ServedWeights {
  ModelShape shape;
  torch::Tensor embed;       // [vocab, dim]
  torch::Tensor qkv_packed;  // [dim, 3 * dim]: columns q | k | v
  torch::Tensor out;         // [vocab, dim]
  torch::Tensor out_bias;    // [vocab]

  // The tensors registered with the endpoint, in registration order.
  std::vector<std::pair<std::string, torch::Tensor>> published() const {
    const int64_t d = shape.dim;
    return {{"embed.weight", embed},
            {"attn.q", qkv_packed.narrow(1, 0, d)},
            {"attn.k", qkv_packed.narrow(1, d, d)},
            {"attn.v", qkv_packed.narrow(1, 2 * d, d)},
            {"out.weight", out},
            {"out.bias", out_bias}};
  }
};

// Zeroed served weights of `shape` (an engine before its first version).
inline ServedWeights make_served_weights(const ModelShape& shape = {}) {
  const auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCPU);
  ServedWeights w;
  w.shape = shape;
  w.embed = torch::zeros({shape.vocab, shape.dim}, opts);
  w.qkv_packed = torch::zeros({shape.dim, 3 * shape.dim}, opts);
  w.out = torch::zeros({shape.vocab, shape.dim}, opts);
  w.out_bias = torch::zeros({shape.vocab}, opts);
  return w;
}

// FNV-1a 64 over every published tensor's name and row-major bytes: equal on the trainer
// and the engine exactly when they hold the same weights.
inline uint64_t weights_digest(const ServedWeights& w) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const auto& [name, t] : w.published()) {
    mix(reinterpret_cast<const uint8_t*>(name.data()), name.size());
    const torch::Tensor c = t.contiguous();
    mix(static_cast<const uint8_t*>(c.data_ptr()), c.nbytes());
  }
  return h;
}

inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace weightcast::examples
