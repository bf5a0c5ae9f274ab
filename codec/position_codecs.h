// Encodings of a chunk's changed positions (ascending indices within the chunk).
//
// Gap codings store g_k = p_k - p_{k-1} - 1 (with p_{-1} = -1). At 1 % density the gaps are
// close to geometric with mean ~99, which a Rice code with k ~ 6 stores in ~8.2 bits (the
// order-0 entropy is ~8.1); Stream VByte spends at least 10 bits per gap but decodes with SIMD.
// The encoder sizes every coding exactly and keeps the smallest (delta_chunk.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

// --- Stream VByte (libstreamvbyte) over gaps.
size_t streamvbyte_gaps_size(std::span<const uint32_t> positions);
void encode_streamvbyte_gaps(std::span<const uint32_t> positions, std::vector<uint8_t>* out);
// Decodes exactly `count` positions below `limit` from exactly the bytes of `section`.
Status decode_streamvbyte_gaps(std::span<const uint8_t> section, uint32_t count, uint32_t limit,
                               std::vector<uint32_t>* positions, const char* where);

// --- Golomb-Rice over gaps: unary(g >> k), then the k low bits of g.
// The k in [0, kMaxRiceK] that minimises the size, and that size in bytes.
struct RicePlan {
  unsigned k = 0;
  size_t bytes = 0;
};
RicePlan plan_rice_gaps(std::span<const uint32_t> positions);
void encode_rice_gaps(std::span<const uint32_t> positions, unsigned k, std::vector<uint8_t>* out);
Status decode_rice_gaps(std::span<const uint8_t> section, uint32_t count, unsigned k,
                        uint32_t limit, std::vector<uint32_t>* positions, const char* where);

// --- Bitmap: bit p set for every changed position p < chunk_length.
inline size_t bitmap_size(uint32_t chunk_length) {
  return (size_t{chunk_length} + 7) / 8;
}
void encode_bitmap(std::span<const uint32_t> positions, uint32_t chunk_length,
                   std::vector<uint8_t>* out);
Status decode_bitmap(std::span<const uint8_t> section, uint32_t count, uint32_t chunk_length,
                     std::vector<uint32_t>* positions, const char* where);

}  // namespace weightcast
