#include "tests/fuzz/nccl_round_fuzz_seeds.h"

#include <xxhash.h>

#include "transport/nccl/broadcast_round.h"

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_nccl_round_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  std::vector<PartDescriptor> parts;
  auto add = [&] {
    auto descriptor = nccl::encode_round_descriptor(parts, {});
    if (!descriptor.ok()) return;
    const auto header = nccl::encode_round_header(
        {42, descriptor->size(), XXH3_64bits(descriptor->data(), descriptor->size())});
    std::vector<uint8_t> seed(header.begin(), header.end());
    seed.insert(seed.end(), descriptor->begin(), descriptor->end());
    seeds.push_back(std::move(seed));
  };
  add();
  parts.push_back({"empty", 0, 0x2d06800538d394c2ull});
  add();
  parts.push_back({"model.layers.0.self_attn.q_proj.weight", 1 << 24, 0x1234});
  parts.push_back({"lm_head.weight", 12345, 0x5678});
  add();
  return seeds;
}

}  // namespace weightcast::fuzzing
