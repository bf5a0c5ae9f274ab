// Synthetic LoRA adapters shaped like real exports, for tests and benchmarks.
//
// GLM-like shared-expert adapter: with share_expert_adapters every routed expert of a layer
// points at the same lora_A/lora_B tensors per projection, so tens of thousands of public
// keys repeat a few hundred storages (the seed's real export: 116,448 keys, 1,545 storages).
// Qwen3-8B-like adapter: dense, every key its own values (must stay on safetensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/tensor_bytes.h"

namespace weightcast {

struct AdapterFixture {
  std::vector<std::vector<uint8_t>> storages;  // owned unique buffers
  std::vector<TensorBytesView> tensors;        // public keys, views into `storages`
  std::string adapter_config_json;
};

struct GlmAdapterOptions {
  int layers = 16;
  int experts = 120;  // routed experts per layer, all sharing one adapter per projection
  int hidden = 256;
  int moe_intermediate = 128;
  int rank = 32;
  uint64_t seed = 1;
};
// keys = layers * (experts * 6 + 4); unique storages = layers * (6 + 4). The defaults give
// 11,584 keys over 160 storages.
AdapterFixture make_glm_shared_expert_adapter(const GlmAdapterOptions& options = {});

struct Qwen3AdapterOptions {
  int layers = 36;
  int hidden = 512;         // Qwen3-8B: 4096 (scaled down by default so tests take seconds)
  int intermediate = 1536;  // Qwen3-8B: 12288
  int rank = 32;
  uint64_t seed = 2;
};
// q/k/v/o/gate/up/down adapters per layer, all distinct: keys = layers * 14.
AdapterFixture make_qwen3_dense_adapter(const Qwen3AdapterOptions& options = {});

}  // namespace weightcast
