#include "codec/streamvbyte_gaps.h"

#include <streamvbyte.h>

#include <cstring>
#include <vector>

namespace weightcast {
namespace {

// streamvbyte_decode may read past its input with SIMD loads, so it gets a padded copy.
constexpr size_t kDecodeSlack = 64;

}  // namespace

size_t streamvbyte_gaps_capacity(uint32_t n) {
  return streamvbyte_max_compressedbytes(n);
}

uint8_t* write_streamvbyte_gaps(uint8_t* out, const uint32_t* positions, uint32_t n) {
  thread_local std::vector<uint32_t> gaps;
  gaps.resize(n);
  uint32_t next = 0;  // p_{k-1} + 1
  for (uint32_t k = 0; k < n; ++k) {
    gaps[k] = positions[k] - next;
    next = positions[k] + 1;
  }
  return out + streamvbyte_encode(gaps.data(), n, out);
}

hd::ChunkDecodeError decode_streamvbyte_gaps(const uint8_t* section, uint32_t size, uint32_t count,
                                             uint32_t length, uint32_t* positions) {
  const hd::ChunkDecodeError laid_out = hd::streamvbyte_layout(section, size, count);
  if (laid_out != hd::kDecodeOk) return laid_out;
  thread_local std::vector<uint8_t> padded;
  padded.resize(size_t{size} + kDecodeSlack);
  std::memcpy(padded.data(), section, size);
  streamvbyte_decode(padded.data(), positions, count);
  return hd::positions_from_gaps(positions, count, length);
}

}  // namespace weightcast
