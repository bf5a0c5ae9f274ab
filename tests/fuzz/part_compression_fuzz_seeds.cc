// Seed inputs for the part compression fuzz target: parts written by compress_part, with and
// without the zstd content checksum.
#include "tests/fuzz/part_compression_fuzz_seeds.h"

#include <random>

#include "codec/delta_encoder.h"
#include "codec/part_compression.h"

namespace weightcast::fuzzing {
namespace {

// n bytes shaped like bf16 weights (a slowly varying high byte) so zstd finds matches and
// entropy-codes literals, which random bytes would not make it do.
std::vector<uint8_t> weight_like(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = (i % 2 == 1) ? static_cast<uint8_t>(0x3C + (i >> 10) % 3)
                          : static_cast<uint8_t>(rng() & 0x0F);
  }
  return out;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Two delta records back to back, as a part holds them: small bf16 updates.
std::vector<uint8_t> delta_part() {
  std::mt19937_64 rng(2028);
  std::vector<uint8_t> part;
  for (int t = 0; t < 2; ++t) {
    std::vector<uint8_t> a = weight_like(2 * 3000, 40 + t), b = a;
    for (size_t i = 0; i < 3000; ++i) {
      if (rng() % 50 == 0) b[2 * i] += static_cast<uint8_t>(1 + rng() % 2);
    }
    EncodeOptions o;
    o.name = "layers." + std::to_string(t) + ".weight";
    o.chunk_elements = 1024;
    auto e = encode_delta(a, b, o);
    if (e.ok()) part.insert(part.end(), e->record.begin(), e->record.end());
  }
  return part;
}

// `part` with its zstd frame's content checksum removed, as a writer other than ours may
// produce it (codec/part_compression.h allows that): the checksum flag, bit 2 of the frame
// header descriptor after the 4-byte zstd magic, cleared and the frame's last 4 bytes, the
// checksum, dropped. Without a checksum, a mutation inside the compressed blocks reaches the
// decoder's output instead of stopping at the checksum.
std::vector<uint8_t> without_checksum(std::vector<uint8_t> part) {
  constexpr size_t kDescriptor = kPartCompressionHeaderBytes + 4;
  part[kDescriptor] &= static_cast<uint8_t>(~0x04);
  part.resize(part.size() - 4);
  return part;
}

}  // namespace

std::vector<std::vector<uint8_t>> make_part_compression_seeds() {
  struct Case {
    std::vector<uint8_t> raw;
    uint32_t width;
    int level;
  };
  const std::vector<uint8_t> part = delta_part();
  const std::vector<Case> cases = {
      {{}, 1, 1},
      {{}, 8, 1},
      {{0x7F}, 2, 1},
      {random_bytes(101, 1), 1, 1},
      {weight_like(1001, 2), 2, 1},  // odd: a one-byte tail
      {weight_like(1003, 3), 4, 3},  // three-byte tail
      {weight_like(4101, 4), 8, 1},
      {weight_like(300 * 1024, 5), 2, 3},  // several 128 KiB zstd blocks
      {part, 1, 1},
      {part, 2, 1},
      {part, 4, 3},
  };
  std::vector<std::vector<uint8_t>> seeds;
  for (const Case& c : cases) {
    auto compressed = compress_part(c.raw, {c.level, c.width});
    if (!compressed.ok() || c.raw.size() > kPartFuzzMaxRawBytes) continue;
    seeds.push_back(without_checksum(*compressed));
    seeds.push_back(std::move(*compressed));
  }
  return seeds;
}

}  // namespace weightcast::fuzzing
