// Decoding and validating one delta chunk on raw pointers: the one statement of the decoding
// half of the chunk format (FORMATS.md "chunk", delta_chunk.h). The CPU's decode_chunk
// (delta_chunk.cc) checks the header and decodes the sections with these functions, Stream
// VByte's positions excepted (libstreamvbyte's kernel, streamvbyte_gaps.h, with the same
// checks); the CUDA apply's block-wide decoder (codec/cuda/cuda_chunk_decode.cuh) runs
// decode_chunk_hd, on one thread, for every chunk it cannot vouch for. Errors are codes
// (chunk_decode_error_text turns them into words on the host).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/bit_stream.h"
#include "codec/chunk_plan_hd.h"
#include "codec/delta_format.h"
#include "codec/hd.h"
#include "codec/value_packing.h"

namespace weightcast::hd {

enum ChunkDecodeError : uint8_t {
  kDecodeOk = 0,
  kShortHeader,
  kBadModeOrReserved,
  kBadChangedCount,
  kPositionsPastEnd,
  kBadRawChunk,
  kRiceParameterOnOtherMode,
  kStreamVByteTruncated,
  kStreamVByteSizeMismatch,
  kGapPastChunkEnd,
  kRiceParameterTooLarge,
  kRiceTruncated,
  kRiceUnusedBytes,
  kBitmapSize,
  kBitmapTooManyPositions,
  kBitmapCountMismatch,
  kValuesWidthTooLarge,
  kValuesNoExceptionCount,
  kValuesExceptionCount,
  kValuesSizeMismatch,
  kValuesExceptionOrder,
  kValuesExceptionWithoutHighBits,
  kValueTooLarge,
  kRawChangeCountMismatch,  // found while applying a whole raw chunk
  kDecodeErrorCount
};

WC_HD inline uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// The 12-byte chunk header, unchecked.
struct ChunkHead {
  uint8_t mode = 0, value_bits = 0, rice_k = 0, reserved = 0;
  uint32_t changed = 0, positions_bytes = 0;
};

// A Stream VByte section of `count` gaps fills exactly its `size` bytes: (count + 3) / 4
// control bytes, then the data bytes they describe.
WC_HD inline ChunkDecodeError streamvbyte_layout(const uint8_t* sec, uint64_t size,
                                                 uint32_t count) {
  const uint64_t control = (uint64_t{count} + 3) / 4;
  if (size < control) return kStreamVByteTruncated;
  uint64_t data = 0;
  for (uint32_t i = 0; i < count; ++i) data += ((sec[i / 4] >> (2 * (i % 4))) & 3u) + 1;
  return size == control + data ? kDecodeOk : kStreamVByteSizeMismatch;
}

// Gaps g_k = p_k - p_{k-1} - 1 (p_{-1} = -1) turned into positions in place, each below
// `length`.
WC_HD inline ChunkDecodeError positions_from_gaps(uint32_t* positions, uint32_t count,
                                                  uint32_t length) {
  uint64_t next = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t p = next + positions[i];
    if (p >= length) return kGapPastChunkEnd;
    positions[i] = static_cast<uint32_t>(p);
    next = p + 1;
  }
  return kDecodeOk;
}

WC_HD inline ChunkDecodeError decode_positions(const ChunkHead& h, const uint8_t* sec,
                                               uint32_t size, uint32_t length,
                                               uint32_t* positions) {
  const uint32_t count = h.changed;
  switch (static_cast<ChunkMode>(h.mode)) {
    case ChunkMode::kGapsStreamVByte: {
      const ChunkDecodeError laid_out = streamvbyte_layout(sec, size, count);
      if (laid_out != kDecodeOk) return laid_out;
      const uint8_t* d = sec + (uint64_t{count} + 3) / 4;
      for (uint32_t i = 0; i < count; ++i) {
        const unsigned bytes = ((sec[i / 4] >> (2 * (i % 4))) & 3u) + 1;
        uint32_t g = 0;
        for (unsigned b = 0; b < bytes; ++b) g |= uint32_t{*d++} << (8 * b);
        positions[i] = g;
      }
      return positions_from_gaps(positions, count, length);
    }
    case ChunkMode::kGapsRice: {
      const unsigned k = h.rice_k;
      if (k > kMaxRiceK) return kRiceParameterTooLarge;
      BitReader r(sec, size);
      uint64_t next = 0;
      for (uint32_t i = 0; i < count; ++i) {
        const uint64_t q = r.get_unary(length);
        const uint64_t g = (q << k) | r.get(k);
        if (r.overrun()) return kRiceTruncated;
        const uint64_t p = next + g;
        if (q > length || p >= length) return kGapPastChunkEnd;
        positions[i] = static_cast<uint32_t>(p);
        next = p + 1;
      }
      if (r.bytes_consumed() != size) return kRiceUnusedBytes;
      return kDecodeOk;
    }
    default: {  // bitmap
      if (size != bitmap_bytes(length)) return kBitmapSize;
      uint32_t found = 0;
      for (uint32_t byte = 0; byte < size; ++byte) {
        uint32_t b = sec[byte];
        while (b != 0) {
          const uint32_t p = byte * 8 + wc_ctz64(b);
          if (p >= length) return kGapPastChunkEnd;
          if (found == count) return kBitmapTooManyPositions;
          positions[found++] = p;
          b &= b - 1;
        }
      }
      return found == count ? kDecodeOk : kBitmapCountMismatch;
    }
  }
}

// The values section's layout (value_packing.h): exception count, then the low bits, the
// exception indices and the high bits, each padded to a byte; checked against `size`.
struct ValuesLayout {
  uint32_t exceptions = 0;
  unsigned iw = 0;  // bits of an exception index
  uint64_t low_bytes = 0, idx_bytes = 0, high_bytes = 0;
};

WC_HD inline ChunkDecodeError values_layout(const uint8_t* sec, uint64_t size, uint32_t count,
                                            unsigned bits, unsigned w, ValuesLayout* out) {
  if (bits > w) return kValuesWidthTooLarge;
  if (size < 4) return kValuesNoExceptionCount;
  ValuesLayout& v = *out;
  v.exceptions = load_le32(sec);
  if (v.exceptions > count || (bits == w && v.exceptions != 0)) return kValuesExceptionCount;
  v.iw = index_bits(count);
  v.low_bytes = (uint64_t{count} * bits + 7) / 8;
  v.idx_bytes = (uint64_t{v.exceptions} * v.iw + 7) / 8;
  v.high_bytes = (uint64_t{v.exceptions} * (w - bits) + 7) / 8;
  return size - 4 == v.low_bytes + v.idx_bytes + v.high_bytes ? kDecodeOk : kValuesSizeMismatch;
}

WC_HD inline ChunkDecodeError decode_values(const uint8_t* sec, uint64_t size, uint32_t count,
                                            unsigned bits, unsigned w, uint32_t* values) {
  ValuesLayout v;
  const ChunkDecodeError laid_out = values_layout(sec, size, count, bits, w, &v);
  if (laid_out != kDecodeOk) return laid_out;
  const uint32_t exceptions = v.exceptions;
  const unsigned iw = v.iw;
  const uint64_t low_bytes = v.low_bytes, idx_bytes = v.idx_bytes, high_bytes = v.high_bytes;
  const uint8_t* base = sec + 4;
  BitReader low(base, low_bytes);
  for (uint32_t i = 0; i < count; ++i) values[i] = low.get(bits);
  BitReader idx(base + low_bytes, idx_bytes);
  BitReader high(base + low_bytes + idx_bytes, high_bytes);
  int64_t previous = -1;
  for (uint32_t e = 0; e < exceptions; ++e) {
    const uint32_t i = idx.get(iw);
    if (static_cast<int64_t>(i) <= previous || i >= count) return kValuesExceptionOrder;
    previous = i;
    const uint32_t hi = high.get(w - bits);
    if (hi == 0) return kValuesExceptionWithoutHighBits;
    values[i] |= hi << bits;
  }
  if (low.overrun() || idx.overrun() || high.overrun()) return kValuesSizeMismatch;
  const uint32_t limit = max_value(w);
  for (uint32_t i = 0; i < count; ++i)
    if (values[i] > limit) return kValueTooLarge;
  return kDecodeOk;
}

// The checks decode_chunk_hd makes before the sections: the header read into `head`, and
// for raw chunks everything. `capacity` is the entry count the caller reserved: a chunk
// claiming more is refused.
WC_HD inline ChunkDecodeError check_chunk_head_hd(const uint8_t* bytes, uint64_t size,
                                                  uint32_t length, unsigned elem_size,
                                                  uint32_t capacity, ChunkHead* head) {
  if (size < kChunkHeaderBytes) return kShortHeader;
  ChunkHead h;
  h.mode = bytes[0];
  h.value_bits = bytes[1];
  h.rice_k = bytes[2];
  h.reserved = bytes[3];
  h.changed = load_le32(bytes + 4);
  h.positions_bytes = load_le32(bytes + 8);
  *head = h;
  if (h.mode == 0 || h.mode > kMaxChunkMode || h.reserved != 0) return kBadModeOrReserved;
  if (h.changed == 0 || h.changed > length || h.changed > capacity) return kBadChangedCount;
  const uint64_t rest = size - kChunkHeaderBytes;
  if (h.positions_bytes > rest) return kPositionsPastEnd;
  if (static_cast<ChunkMode>(h.mode) == ChunkMode::kRaw) {
    if (h.positions_bytes != uint64_t{length} * elem_size || rest != h.positions_bytes ||
        h.value_bits != 0 || h.rice_k != 0) {
      return kBadRawChunk;
    }
    return kDecodeOk;
  }
  if (static_cast<ChunkMode>(h.mode) != ChunkMode::kGapsRice && h.rice_k != 0)
    return kRiceParameterOnOtherMode;
  return kDecodeOk;
}

// Checks the chunk's header and, for every mode but raw, decodes its `head->changed`
// positions and values into arrays of at least that many entries (see check_chunk_head_hd).
// For raw chunks the new values are the length * elem_size bytes after the header.
WC_HD inline ChunkDecodeError decode_chunk_hd(const uint8_t* bytes, uint64_t size, uint32_t length,
                                              unsigned elem_size, uint32_t capacity,
                                              uint32_t* positions, uint32_t* values,
                                              ChunkHead* head) {
  const ChunkDecodeError checked =
      check_chunk_head_hd(bytes, size, length, elem_size, capacity, head);
  if (checked != kDecodeOk || static_cast<ChunkMode>(head->mode) == ChunkMode::kRaw) return checked;
  const ChunkHead& h = *head;
  const uint64_t rest = size - kChunkHeaderBytes;
  const uint8_t* sec = bytes + kChunkHeaderBytes;
  const ChunkDecodeError e = decode_positions(h, sec, h.positions_bytes, length, positions);
  if (e != kDecodeOk) return e;
  return decode_values(sec + h.positions_bytes, rest - h.positions_bytes, h.changed, h.value_bits,
                       elem_size * 8, values);
}

// Words for a code, for messages made on the host ("tensor 'x' chunk 7: ...").
inline const char* chunk_decode_error_text(uint8_t code) {
  static const char* const kText[] = {
      "ok",
      "chunk is shorter than its 12-byte header",
      "unknown chunk mode or non-zero reserved byte",
      "change count is zero or exceeds the chunk length",
      "positions section runs past the chunk end",
      "raw chunk has the wrong size or non-zero value width/Rice parameter",
      "Rice parameter set on a chunk of another mode",
      "Stream VByte control bytes are truncated",
      "Stream VByte section size disagrees with its control bytes",
      "a position leads past the chunk end",
      "Rice parameter exceeds the largest allowed",
      "Rice codes are truncated",
      "Rice section has unused bytes",
      "bitmap size does not match the chunk length",
      "bitmap marks more positions than the chunk claims",
      "bitmap marks fewer positions than the chunk claims",
      "values section width exceeds the element width",
      "values section is truncated before its exception count",
      "values section claims too many exceptions",
      "values section size disagrees with its widths",
      "values section exception index out of order or out of range",
      "values section exception has no high bits",
      "a value exceeds the largest difference of the element width",
      "raw chunk's change count differs from the elements it changes",
  };
  return code < kDecodeErrorCount ? kText[code] : "unknown decode error";
}

}  // namespace weightcast::hd
