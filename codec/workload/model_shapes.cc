#include "codec/workload/model_shapes.h"

#include <algorithm>
#include <cmath>

namespace weightcast {
namespace {

// The knobs that tell the two families apart, after scaling.
struct MoeConfig {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t experts = 0;
  int64_t moe_intermediate = 0;
  int64_t dense_intermediate = 0;  // MLP width of the first `dense_layers` layers
  int64_t dense_layers = 0;
  int64_t shared_experts = 0;  // GLM's always-on expert, moe_intermediate wide each
  bool qk_norm = false;
  bool attention_bias = false;
  bool router_bias = false;  // mlp.gate.e_score_correction_bias
};

MoeConfig base_config(ModelFamily family) {
  MoeConfig c;
  switch (family) {
    case ModelFamily::kQwen3_30B_A3B:
      c.vocab = 151936;
      c.hidden = 2048;
      c.layers = 48;
      c.q_heads = 32;
      c.kv_heads = 4;
      c.head_dim = 128;
      c.experts = 128;
      c.moe_intermediate = 768;
      c.qk_norm = true;
      break;
    case ModelFamily::kGlmMoe:
      c.vocab = 151552;
      c.hidden = 4096;
      c.layers = 46;
      c.q_heads = 96;
      c.kv_heads = 8;
      c.head_dim = 128;
      c.experts = 128;
      c.moe_intermediate = 1408;
      c.dense_intermediate = 10944;
      c.dense_layers = 1;
      c.shared_experts = 1;
      c.attention_bias = true;
      c.router_bias = true;
      break;
  }
  return c;
}

int64_t scaled(int64_t x, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(x) * scale));
}

MoeConfig scale_config(MoeConfig c, double scale) {
  if (!(scale > 0)) scale = 0;  // NaN and negatives give the smallest model
  const double q_width = static_cast<double>(c.q_heads * c.head_dim) * scale;
  if (q_width >= static_cast<double>(c.head_dim)) {
    c.kv_heads = scaled(c.kv_heads, scale);
    const int64_t groups = std::max<int64_t>(
        1, std::llround(static_cast<double>(c.q_heads) * scale / static_cast<double>(c.kv_heads)));
    c.q_heads = groups * c.kv_heads;
  } else {
    c.q_heads = 1;
    c.kv_heads = 1;
    c.head_dim = std::max<int64_t>(1, std::llround(q_width));
  }
  c.vocab = scaled(c.vocab, scale);
  c.hidden = scaled(c.hidden, scale);
  c.layers = std::max(scaled(c.layers, scale), c.dense_layers + 1);
  c.experts = scaled(c.experts, scale);
  c.moe_intermediate = scaled(c.moe_intermediate, scale);
  if (c.dense_intermediate > 0) c.dense_intermediate = scaled(c.dense_intermediate, scale);
  return c;
}

class SpecList {
 public:
  void matrix(std::string name, int64_t out, int64_t in) {
    specs_.push_back({std::move(name), {out, in}, in});
  }
  void vector(std::string name, int64_t n, int64_t fan_in) {
    specs_.push_back({std::move(name), {n}, fan_in});
  }
  // gate_proj, up_proj and down_proj of one SwiGLU MLP under `prefix`.
  void mlp(const std::string& prefix, int64_t hidden, int64_t intermediate) {
    matrix(prefix + "gate_proj.weight", intermediate, hidden);
    matrix(prefix + "up_proj.weight", intermediate, hidden);
    matrix(prefix + "down_proj.weight", hidden, intermediate);
  }
  std::vector<TensorShapeSpec> take() { return std::move(specs_); }

 private:
  std::vector<TensorShapeSpec> specs_;
};

void add_attention(SpecList& out, const std::string& p, const MoeConfig& c) {
  const int64_t q = c.q_heads * c.head_dim;
  const int64_t kv = c.kv_heads * c.head_dim;
  out.matrix(p + "self_attn.q_proj.weight", q, c.hidden);
  if (c.attention_bias) out.vector(p + "self_attn.q_proj.bias", q, c.hidden);
  out.matrix(p + "self_attn.k_proj.weight", kv, c.hidden);
  if (c.attention_bias) out.vector(p + "self_attn.k_proj.bias", kv, c.hidden);
  out.matrix(p + "self_attn.v_proj.weight", kv, c.hidden);
  if (c.attention_bias) out.vector(p + "self_attn.v_proj.bias", kv, c.hidden);
  out.matrix(p + "self_attn.o_proj.weight", c.hidden, q);
  if (c.qk_norm) {
    out.vector(p + "self_attn.q_norm.weight", c.head_dim, 1);
    out.vector(p + "self_attn.k_norm.weight", c.head_dim, 1);
  }
}

void add_moe(SpecList& out, const std::string& p, const MoeConfig& c) {
  out.matrix(p + "mlp.gate.weight", c.experts, c.hidden);
  if (c.router_bias) out.vector(p + "mlp.gate.e_score_correction_bias", c.experts, 1);
  for (int64_t e = 0; e < c.experts; ++e) {
    out.mlp(p + "mlp.experts." + std::to_string(e) + ".", c.hidden, c.moe_intermediate);
  }
  if (c.shared_experts > 0) {
    out.mlp(p + "mlp.shared_experts.", c.hidden, c.moe_intermediate * c.shared_experts);
  }
}

}  // namespace

uint64_t TensorShapeSpec::elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

Result<ModelFamily> model_family_from_name(std::string_view name) {
  if (name == "qwen3-30b-a3b") return ModelFamily::kQwen3_30B_A3B;
  if (name == "glm-moe") return ModelFamily::kGlmMoe;
  return invalid_argument("unknown model family '" + std::string(name) +
                          "' (expected qwen3-30b-a3b or glm-moe)");
}

std::string_view model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen3_30B_A3B:
      return "qwen3-30b-a3b";
    case ModelFamily::kGlmMoe:
      return "glm-moe";
  }
  return "unknown";
}

std::vector<TensorShapeSpec> model_layer_list(ModelFamily family, double scale) {
  const MoeConfig c = scale_config(base_config(family), scale);
  SpecList out;
  out.matrix("model.embed_tokens.weight", c.vocab, c.hidden);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add_attention(out, p, c);
    if (l < c.dense_layers) {
      out.mlp(p + "mlp.", c.hidden, c.dense_intermediate);
    } else {
      add_moe(out, p, c);
    }
    out.vector(p + "input_layernorm.weight", c.hidden, 1);
    out.vector(p + "post_attention_layernorm.weight", c.hidden, 1);
  }
  out.vector("model.norm.weight", c.hidden, 1);
  out.matrix("lm_head.weight", c.vocab, c.hidden);
  return out.take();
}

uint64_t total_elements(const std::vector<TensorShapeSpec>& specs) {
  uint64_t n = 0;
  for (const auto& s : specs) n += s.elements();
  return n;
}

}  // namespace weightcast
