// Parameter lists shaped like real MoE checkpoints (HF names, shapes, one tensor per expert
// projection), scalable down so that tests and benchmarks see the same mix of tensor sizes,
// names and counts at a size that fits the machine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

struct TensorShapeSpec {
  std::string name;            // HF state-dict key, e.g. "model.layers.0.mlp.gate.weight"
  std::vector<int64_t> shape;  // row-major, [out, in] for a linear layer's weight
  // Width that sets the init scale (SyntheticTensor's sigma = 1/sqrt(fan_in)): a matrix's input
  // features; the embedding's hidden size; a bias's projection input; 1 for norm scales and
  // the router correction bias, whose values are O(1).
  int64_t fan_in = 1;

  uint64_t elements() const;
};

enum class ModelFamily {
  // Qwen3-30B-A3B: vocab 151936, hidden 2048, 48 layers, 32 q / 4 kv heads of 128, q/k norms,
  // every layer MoE with 128 experts of intermediate 768, untied lm_head.
  kQwen3_30B_A3B,
  // GLM-4.5-Air-like: vocab 151552, hidden 4096, 46 layers, 96 q / 8 kv heads of 128 with
  // q/k/v biases; layer 0 a dense MLP of 10944, the rest MoE with 128 routed experts of 1408
  // plus one shared expert and a router correction bias; untied lm_head. (The checkpoint's
  // extra next-token-prediction layer is left out.)
  kGlmMoe,
};

// "qwen3-30b-a3b" or "glm-moe"; anything else is kInvalidArgument.
Result<ModelFamily> model_family_from_name(std::string_view name);
std::string_view model_family_name(ModelFamily family);

// The family's parameters in checkpoint order (embedding, layers, final norm, lm_head).
//
// `scale` multiplies the vocabulary, hidden size, intermediate sizes, layer count and expert
// count, each rounded to nearest and at least 1 (layers at least one past the dense ones, so
// a scaled GLM keeps an MoE layer). Attention width (heads * head_dim) follows the same
// factor: kv heads are scaled, q heads scaled and rounded to a multiple of the kv heads, and
// head_dim stays 128 while the scaled q width is at least one head; below that there is one
// q and one kv head whose head_dim is the scaled q width. A non-positive or NaN scale gives
// the smallest model; a scale above 1 gives a larger one.
//
// Totals at scale 1: Qwen3-30B-A3B 30,532,122,624 elements in 18,867 tensors; GLM
// 106,852,251,264 in 17,925. At 0.05: Qwen3 hidden 102, 2 layers of 6 experts; GLM hidden
// 205, a dense layer and an MoE layer of 6 experts.
std::vector<TensorShapeSpec> model_layer_list(ModelFamily family, double scale);

uint64_t total_elements(const std::vector<TensorShapeSpec>& specs);

}  // namespace weightcast
