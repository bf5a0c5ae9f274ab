#include "codec/workload/adapter_fixtures.h"

#include <cmath>
#include <cstring>
#include <random>

namespace weightcast {
namespace {

// An fp32 [rows, cols] storage ~ N(0, scale). The first tensor of each fixture also holds a
// negative zero and a NaN with a payload, so exactness is tested on every path.
size_t add_storage(AdapterFixture* f, int64_t rows, int64_t cols, float scale, std::mt19937_64& rng,
                   bool specials) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (auto& v : values) v = normal(rng);
  if (specials && values.size() >= 2) {
    values[0] = -0.0f;
    const uint32_t nan_with_payload = 0x7FC01234u;
    std::memcpy(&values[1], &nan_with_payload, 4);
  }
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  f->storages.push_back(std::move(bytes));
  return f->storages.size() - 1;
}

// A public key and the storage it views; views are made once every storage exists.
struct PendingKey {
  std::string name;
  size_t storage;
  int64_t rows, cols;
};

void add_keys(AdapterFixture* f, std::vector<PendingKey>& keys) {
  for (auto& k : keys) {
    f->tensors.push_back(
        {std::move(k.name), DType::kF32, {k.rows, k.cols}, f->storages[k.storage]});
  }
}

std::string config_json(int rank, const char* modules, bool shared) {
  return std::string("{\n  \"peft_type\": \"LORA\",\n  \"r\": ") + std::to_string(rank) +
         ",\n  \"lora_alpha\": " + std::to_string(2 * rank) + ",\n  \"target_modules\": [" +
         modules + "],\n  \"share_expert_adapters\": " + (shared ? "true" : "false") + "\n}\n";
}

}  // namespace

AdapterFixture make_glm_shared_expert_adapter(const GlmAdapterOptions& o) {
  AdapterFixture f;
  std::mt19937_64 rng(o.seed);
  const float a_scale = 1.0f / std::sqrt(static_cast<float>(o.hidden));
  const float b_scale = 1e-3f;
  struct Proj {
    const char* name;
    int in, out;
  };
  const Proj experts[] = {{"gate_proj", o.hidden, o.moe_intermediate},
                          {"up_proj", o.hidden, o.moe_intermediate},
                          {"down_proj", o.moe_intermediate, o.hidden}};
  const Proj attention[] = {{"q_proj", o.hidden, o.hidden}, {"v_proj", o.hidden, o.hidden / 4}};
  std::vector<PendingKey> keys;
  for (int l = 0; l < o.layers; ++l) {
    const std::string layer = "base_model.model.model.layers." + std::to_string(l);
    for (const auto& p : attention) {
      const size_t a = add_storage(&f, o.rank, p.in, a_scale, rng, f.storages.empty());
      const size_t b = add_storage(&f, p.out, o.rank, b_scale, rng, false);
      keys.push_back({layer + ".self_attn." + p.name + ".lora_A.weight", a, o.rank, p.in});
      keys.push_back({layer + ".self_attn." + p.name + ".lora_B.weight", b, p.out, o.rank});
    }
    for (const auto& p : experts) {
      const size_t a = add_storage(&f, o.rank, p.in, a_scale, rng, false);
      const size_t b = add_storage(&f, p.out, o.rank, b_scale, rng, false);
      for (int e = 0; e < o.experts; ++e) {
        const std::string base = layer + ".mlp.experts." + std::to_string(e) + "." + p.name;
        keys.push_back({base + ".lora_A.weight", a, o.rank, p.in});
        keys.push_back({base + ".lora_B.weight", b, p.out, o.rank});
      }
    }
  }
  add_keys(&f, keys);
  f.adapter_config_json = config_json(
      o.rank, "\"q_proj\", \"v_proj\", \"gate_proj\", \"up_proj\", \"down_proj\"", true);
  return f;
}

AdapterFixture make_qwen3_dense_adapter(const Qwen3AdapterOptions& o) {
  AdapterFixture f;
  std::mt19937_64 rng(o.seed);
  const int kv = o.hidden / 4;
  struct Proj {
    const char* name;
    const char* block;
    int in, out;
  };
  const Proj projs[] = {
      {"q_proj", "self_attn", o.hidden, o.hidden},    {"k_proj", "self_attn", o.hidden, kv},
      {"v_proj", "self_attn", o.hidden, kv},          {"o_proj", "self_attn", o.hidden, o.hidden},
      {"gate_proj", "mlp", o.hidden, o.intermediate}, {"up_proj", "mlp", o.hidden, o.intermediate},
      {"down_proj", "mlp", o.intermediate, o.hidden}};
  std::vector<PendingKey> keys;
  for (int l = 0; l < o.layers; ++l) {
    for (const auto& p : projs) {
      const std::string base =
          "base_model.model.model.layers." + std::to_string(l) + "." + p.block + "." + p.name;
      const size_t a =
          add_storage(&f, o.rank, p.in, 1.0f / std::sqrt(float(p.in)), rng, f.storages.empty());
      const size_t b = add_storage(&f, p.out, o.rank, 1e-3f, rng, false);
      keys.push_back({base + ".lora_A.weight", a, o.rank, p.in});
      keys.push_back({base + ".lora_B.weight", b, p.out, o.rank});
    }
  }
  add_keys(&f, keys);
  f.adapter_config_json = config_json(
      o.rank,
      "\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"up_proj\", \"down_proj\"",
      false);
  return f;
}

}  // namespace weightcast
