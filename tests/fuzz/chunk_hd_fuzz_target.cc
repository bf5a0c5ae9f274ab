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
#include "tests/fuzz/chunk_hd_fuzz_seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  if (size < fuzzing::kChunkFuzzPrefixBytes) return 0;
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
  if (!cpu_ok) return 0;
  if (head.mode != static_cast<uint8_t>(cpu.mode)) std::abort();
  if (cpu.mode == ChunkMode::kRaw) return 0;
  for (uint32_t i = 0; i < head.changed; ++i) {
    if (positions[i] != cpu.positions[i] || values[i] != cpu.values[i]) std::abort();
  }
  return 0;
}
