// The CPU's specialised kernel for the Stream VByte positions section (FORMATS.md "chunk"):
// libstreamvbyte's SIMD encoder and decoder over the gaps g_k = p_k - p_{k-1} - 1. They
// write and accept exactly the bytes of hd::write_streamvbyte_gaps and hd::decode_positions
// (chunk_plan_hd.h, chunk_decode_hd.h), with whose checks they share the section's layout
// (hd::streamvbyte_layout) and the gaps' bounds (hd::positions_from_gaps).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/chunk_decode_hd.h"

namespace weightcast {

// Bytes write_streamvbyte_gaps may touch at its `out` for n gaps (its SIMD stores reach past
// the section it writes, which is hd::streamvbyte_size bytes).
size_t streamvbyte_gaps_capacity(uint32_t n);

// Writes the section for `n` ascending positions; returns its end.
uint8_t* write_streamvbyte_gaps(uint8_t* out, const uint32_t* positions, uint32_t n);

// Decodes `count` positions below `length` from exactly the `size` bytes at `section`.
hd::ChunkDecodeError decode_streamvbyte_gaps(const uint8_t* section, uint32_t size, uint32_t count,
                                             uint32_t length, uint32_t* positions);

}  // namespace weightcast
