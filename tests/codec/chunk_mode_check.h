// Which chunk modes an encode used, checked against what the test asked for: a test that forces
// one mode (ChunkModeMask) to reach one decoder must see that decoder's chunks in the record,
// not trust that the encoder honoured the mask.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <span>
#include <string>

#include "codec/delta_encoder.h"
#include "codec/delta_format.h"

namespace weightcast::testing {

// The mask bit that allows `mode` (kUnchanged: none, an unchanged chunk needs no permission).
inline uint32_t mode_mask_bit(ChunkMode mode) {
  switch (mode) {
    case ChunkMode::kGapsStreamVByte:
      return kAllowStreamVByte;
    case ChunkMode::kGapsRice:
      return kAllowRice;
    case ChunkMode::kBitmap:
      return kAllowBitmap;
    case ChunkMode::kRaw:
      return kAllowRaw;
    case ChunkMode::kUnchanged:
      break;
  }
  return 0;
}

// The mode each chunk of `rec` is stored in, read from the record's bytes (the first byte of
// a chunk; an empty chunk is unchanged), counted per mode.
inline std::array<uint32_t, kMaxChunkMode + 1> record_chunk_modes(const DeltaRecordView& rec) {
  std::array<uint32_t, kMaxChunkMode + 1> counts{};
  for (const auto& chunk : rec.chunks) {
    const uint8_t mode = chunk.empty() ? 0 : chunk[0];
    if (mode <= kMaxChunkMode) ++counts[mode];
  }
  return counts;
}

// The encoder's tally agrees with the parsed record; the chunks stored as unchanged are exactly
// those whose old and new bytes are equal; and every other chunk is in a mode `modes` allows
// (0 means any). For a mask of one mode that is: every chunk with a change is in that mode.
inline void expect_chunk_modes(const EncodedDelta& enc, const DeltaRecordView& rec,
                               std::span<const uint8_t> old_bytes,
                               std::span<const uint8_t> new_bytes, uint32_t modes) {
  const DeltaRecordHeader& h = rec.header;
  ASSERT_EQ(rec.chunks.size(), h.chunk_count());
  const size_t es = dtype_size(h.dtype);
  ASSERT_EQ(old_bytes.size(), h.range_elements * es);
  ASSERT_EQ(new_bytes.size(), h.range_elements * es);
  uint32_t unchanged_in_data = 0;
  for (uint32_t c = 0; c < h.chunk_count(); ++c) {
    const size_t at = size_t{c} * h.chunk_elements * es;
    const size_t len = size_t{h.chunk_length(c)} * es;
    const bool same = std::memcmp(old_bytes.data() + at, new_bytes.data() + at, len) == 0;
    unchanged_in_data += same ? 1 : 0;
    EXPECT_EQ(rec.chunks[c].empty(), same) << "chunk " << c;
    if (rec.chunks[c].empty()) continue;
    const auto mode = static_cast<ChunkMode>(rec.chunks[c][0]);
    EXPECT_TRUE(modes == 0 || (mode_mask_bit(mode) & modes) != 0)
        << "chunk " << c << " is " << chunk_mode_name(mode) << ", the mask " << modes
        << " does not allow it";
  }
  const auto counts = record_chunk_modes(rec);
  for (size_t m = 0; m < counts.size(); ++m) {
    EXPECT_EQ(enc.chunks_by_mode[m], counts[m])
        << "chunks in mode " << chunk_mode_name(static_cast<ChunkMode>(m));
  }
  EXPECT_EQ(counts[0], unchanged_in_data) << "unchanged chunks";
}

}  // namespace weightcast::testing
