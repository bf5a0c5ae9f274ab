// libFuzzer target, differential: the chunk decoder the CUDA apply runs (chunk_decode_hd.h)
// against the CPU's decode_chunk on the same bytes. Invariants on every input: both accept
// or both refuse; when both accept, the positions and values (or, for raw chunks, the mode)
// agree. Anything else, or a crash or out-of-bounds read, aborts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/chunk_decode_hd.h"
#include "codec/delta_chunk.h"
#include "codec/delta_format.h"
#include "tests/fuzz/chunk_hd_fuzz_seeds.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kBadHead, kRefused, kAccepted };
}  // namespace

std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused by the chunk's 12-byte header (size, mode, reserved)", 5},
      {"refused by both decoders past the header", 25},
      {"accepted by both, which agree", 3},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

// Both decoders' first check: a 12-byte header whose mode is known and reserved byte is 0.
bool has_chunk_head(std::span<const uint8_t> chunk) {
  return chunk.size() >= 12 && chunk[0] != 0 && chunk[0] <= weightcast::kMaxChunkMode &&
         chunk[3] == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  if (size < fuzzing::kChunkFuzzPrefixBytes) {
    fuzzing::fuzz_reached(fuzzing::kBadHead);
    return 0;
  }
  const unsigned es = data[0] == 0 ? 1 : data[0] == 1 ? 2 : 4;
  const uint32_t length = (data[1] == 0 ? 256u : data[1]) * 64u;
  const std::span<const uint8_t> chunk(data + fuzzing::kChunkFuzzPrefixBytes,
                                       size - fuzzing::kChunkFuzzPrefixBytes);
  // An exact-size copy, so that any read past the chunk is caught by ASan.
  const std::vector<uint8_t> bytes(chunk.begin(), chunk.end());
  DecodedChunk cpu;
  const bool cpu_ok = decode_chunk(bytes, length, es, &cpu, "fuzz").ok();
  std::vector<uint32_t> positions(length), values(length);
  hd::ChunkHead head;
  const hd::ChunkDecodeError e = hd::decode_chunk_hd(bytes.data(), bytes.size(), length, es, length,
                                                     positions.data(), values.data(), &head);
  if (cpu_ok != (e == hd::kDecodeOk)) std::abort();
  if (!cpu_ok) {
    fuzzing::fuzz_reached(has_chunk_head(chunk) ? fuzzing::kRefused : fuzzing::kBadHead);
    return 0;
  }
  if (head.mode != static_cast<uint8_t>(cpu.mode)) std::abort();
  if (cpu.mode != ChunkMode::kRaw) {
    for (uint32_t i = 0; i < head.changed; ++i) {
      if (positions[i] != cpu.positions[i] || values[i] != cpu.values[i]) std::abort();
    }
  }
  fuzzing::fuzz_reached(fuzzing::kAccepted);
  return 0;
}
