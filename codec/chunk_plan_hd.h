// Sizing and writing one delta chunk from its changed positions and values, on raw pointers:
// the one statement of the encoding half of the chunk format (FORMATS.md "chunk", delta_chunk.h).
// The CPU encoder (encode_chunk, delta_chunk.cc) plans with plan_chunk and writes with these
// writers, Stream VByte excepted (libstreamvbyte's kernel, streamvbyte_gaps.h, writes the same
// bytes). The GPU plans and writes each chunk with a whole thread block
// (codec/cuda/cuda_chunk_write.cuh): the sums below reduced over the block, the same
// plan_from_sizes decision, the same bits at scanned offsets;
// tests/codec/chunk_codec_hd_test.cc and the CUDA tests hold each against these functions.
//
// On the host a writer may store up to kBitSinkSlack bytes past the end of what it writes
// (bit_stream.h): write_chunk needs plan.total_bytes + kBitSinkSlack bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/bit_stream.h"
#include "codec/delta_chunk.h"
#include "codec/delta_format.h"
#include "codec/hd.h"
#include "codec/value_packing.h"

namespace weightcast::hd {

WC_HD inline void store_le32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

// What encode_chunk decides for a chunk: mode, widths and exact sizes.
struct ChunkPlan {
  uint8_t mode = 0;  // ChunkMode
  uint8_t value_bits = 0;
  uint8_t rice_k = 0;
  uint32_t changed = 0;
  uint32_t positions_bytes = 0;
  uint32_t values_bytes = 0;  // 0 for raw and unchanged chunks
  uint32_t exceptions = 0;
  uint32_t total_bytes = 0;  // header included; 0 when nothing changed
};

WC_HD inline uint32_t bitmap_bytes(uint32_t length) {
  return (length + 7) / 8;
}

// Gap g_k = p_k - p_{k-1} - 1 with p_{-1} = -1.
WC_HD inline uint32_t gap_at(const uint32_t* positions, uint32_t k) {
  return k == 0 ? positions[0] : positions[k] - positions[k - 1] - 1;
}

WC_HD inline unsigned streamvbyte_bytes(uint32_t gap) {
  return gap < (1u << 8) ? 1 : gap < (1u << 16) ? 2 : gap < (1u << 24) ? 3 : 4;
}

WC_HD inline uint64_t streamvbyte_size(const uint32_t* positions, uint32_t n) {
  uint64_t bytes = (uint64_t{n} + 3) / 4;
  uint32_t next = 0;
  for (uint32_t k = 0; k < n; ++k) {
    bytes += streamvbyte_bytes(positions[k] - next);
    next = positions[k] + 1;
  }
  return bytes;
}

// Golomb-Rice over gaps (unary(g >> k), then the k low bits of g): the k in [0, kMaxRiceK]
// that minimises the section lies next to log2(mean gap), so three candidates are sized. At
// 1 % density gaps are close to geometric with mean ~99, which k ~ 6 stores in ~8.2 bits (the
// order-0 entropy is ~8.1); Stream VByte spends at least 10 bits per gap but decodes with
// SIMD. The smallest candidate, from the mean gap of `n` ascending positions.
WC_HD inline unsigned rice_low_k(const uint32_t* positions, uint32_t n) {
  const uint64_t gap_sum = uint64_t{positions[n - 1]} + 1 - n;
  const uint64_t mean = gap_sum / n;
  const unsigned k0 = mean == 0 ? 0u : 31u - wc_clz32(static_cast<uint32_t>(mean));
  const unsigned lo_candidate = k0 == 0 ? 0u : k0 - 1;
  return lo_candidate < kMaxRiceK - 2 ? lo_candidate : kMaxRiceK - 2;
}

// The best of the three candidates lo, lo + 1, lo + 2 given q[i] = sum of gap >> (lo + i).
WC_HD inline void choose_rice(const uint64_t q[3], unsigned lo, uint32_t n, unsigned* k_out,
                              uint64_t* bytes_out) {
  uint64_t best = ~uint64_t{0};
  unsigned best_k = 0;
  for (unsigned i = 0; i < 3; ++i) {
    const uint64_t bytes = (q[i] + uint64_t{n} * (lo + i + 1) + 7) / 8;
    if (bytes < best) {
      best = bytes;
      best_k = lo + i;
    }
  }
  *k_out = best_k;
  *bytes_out = best;
}

WC_HD inline void plan_rice(const uint32_t* positions, uint32_t n, unsigned* k_out,
                            uint64_t* bytes_out) {
  const unsigned lo = rice_low_k(positions, n);
  uint64_t q[3] = {0, 0, 0};
  uint32_t next = 0;  // p_{k-1} + 1
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t g = positions[k] - next;
    next = positions[k] + 1;
    q[0] += g >> lo;
    q[1] += g >> (lo + 1);
    q[2] += g >> (lo + 2);
  }
  choose_rice(q, lo, n, k_out, bytes_out);
}

// The values section's low width (value_packing.h) from the histogram of the values' bit lengths.
WC_HD inline void choose_values(const uint32_t hist[33], uint32_t n, unsigned w, unsigned* bits_out,
                                uint32_t* exceptions_out, uint64_t* bytes_out) {
  const unsigned iw = index_bits(n);
  uint64_t best = ~uint64_t{0};
  uint32_t wider = n - hist[0];
  for (unsigned b = 0; b <= w; ++b) {
    const uint64_t bytes = 4 + (uint64_t{n} * b + 7) / 8 + (uint64_t{wider} * iw + 7) / 8 +
                           (uint64_t{wider} * (w - b) + 7) / 8;
    if (bytes < best) {
      best = bytes;
      *bits_out = b;
      *exceptions_out = wider;
    }
    if (b < w) wider -= hist[b + 1];
  }
  *bytes_out = best;
}

// The low width that minimises the values section (value_packing.h).
WC_HD inline void plan_values(const uint32_t* values, uint32_t n, unsigned w, unsigned* bits_out,
                              uint32_t* exceptions_out, uint64_t* bytes_out) {
  uint32_t hist[33] = {};
  for (uint32_t k = 0; k < n; ++k) ++hist[wc_bit_length(values[k])];
  choose_values(hist, n, w, bits_out, exceptions_out, bytes_out);
}

// Stream VByte needs at least 10 bits per gap; it is sized only when it could win.
WC_HD inline bool streamvbyte_cannot_win(uint32_t allowed_modes, uint64_t rice_bytes, uint32_t n) {
  return (allowed_modes & kAllowRice) != 0 && rice_bytes <= uint64_t{n} + n / 4;
}

// What each section would cost, as plan_chunk and the CUDA encoder's block-wide pass find it.
struct ChunkSizes {
  unsigned value_bits = 0, rice_k = 0;
  uint32_t exceptions = 0;
  uint64_t values_bytes = 0, rice_bytes = 0, svb_bytes = 0;
};

// The choice encode_chunk makes among `allowed_modes` (ChunkModeMask) for `n` changes in a
// chunk of `length` elements, given the sizes.
WC_HD inline ChunkPlan plan_from_sizes(const ChunkSizes& z, uint32_t n, uint32_t length,
                                       unsigned elem_size, uint32_t allowed_modes) {
  ChunkPlan plan;
  plan.changed = n;
  if (n == 0) return plan;
  const uint64_t svb_bytes =
      streamvbyte_cannot_win(allowed_modes, z.rice_bytes, n) ? (~uint64_t{0}) / 4 : z.svb_bytes;
  struct Candidate {
    ChunkMode mode;
    uint32_t mask;
    uint64_t positions_bytes;
    bool has_values;
  };
  const Candidate candidates[4] = {
      {ChunkMode::kGapsRice, kAllowRice, z.rice_bytes, true},
      {ChunkMode::kGapsStreamVByte, kAllowStreamVByte, svb_bytes, true},
      {ChunkMode::kBitmap, kAllowBitmap, bitmap_bytes(length), true},
      {ChunkMode::kRaw, kAllowRaw, uint64_t{length} * elem_size, false},
  };
  int best = -1;
  uint64_t best_bytes = ~uint64_t{0};
  for (int i = 0; i < 4; ++i) {
    const Candidate& c = candidates[i];
    if ((allowed_modes & c.mask) == 0) continue;
    const uint64_t total = c.positions_bytes + (c.has_values ? z.values_bytes : 0);
    if (total < best_bytes) {
      best = i;
      best_bytes = total;
    }
  }
  if (best < 0) best = 0;  // an empty mask means "any": Rice, as encode_chunk does
  const Candidate& c = candidates[best];
  plan.mode = static_cast<uint8_t>(c.mode);
  plan.value_bits = static_cast<uint8_t>(c.has_values ? z.value_bits : 0);
  plan.rice_k = static_cast<uint8_t>(c.mode == ChunkMode::kGapsRice ? z.rice_k : 0);
  plan.positions_bytes = static_cast<uint32_t>(c.positions_bytes);
  plan.values_bytes = c.has_values ? static_cast<uint32_t>(z.values_bytes) : 0;
  plan.exceptions = c.has_values ? z.exceptions : 0;
  plan.total_bytes =
      static_cast<uint32_t>(kChunkHeaderBytes + plan.positions_bytes + plan.values_bytes);
  return plan;
}

// The plan encode_chunk makes for `n` changes (ascending `positions` within a chunk of
// `length` elements, their `values`), choosing among `allowed_modes` (ChunkModeMask).
WC_HD inline ChunkPlan plan_chunk(const uint32_t* positions, const uint32_t* values, uint32_t n,
                                  uint32_t length, unsigned elem_size, uint32_t allowed_modes) {
  if (n == 0) return plan_from_sizes({}, 0, length, elem_size, allowed_modes);
  ChunkSizes z;
  plan_values(values, n, elem_size * 8, &z.value_bits, &z.exceptions, &z.values_bytes);
  plan_rice(positions, n, &z.rice_k, &z.rice_bytes);
  if (!streamvbyte_cannot_win(allowed_modes, z.rice_bytes, n))
    z.svb_bytes = streamvbyte_size(positions, n);
  return plan_from_sizes(z, n, length, elem_size, allowed_modes);
}

WC_HD inline uint8_t* write_chunk_header(uint8_t* p, const ChunkPlan& plan) {
  p[0] = plan.mode;
  p[1] = plan.value_bits;
  p[2] = plan.rice_k;
  p[3] = 0;
  store_le32(p + 4, plan.changed);
  store_le32(p + 8, plan.positions_bytes);
  return p + kChunkHeaderBytes;
}

WC_HD inline uint8_t* write_rice_gaps(uint8_t* p, const uint32_t* positions, uint32_t n,
                                      unsigned k) {
  BitSink sink(p);
  const uint32_t mask = bit_mask(k);
  uint32_t next = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t g = positions[i] - next;
    next = positions[i] + 1;
    const uint32_t q = g >> k;
    if (q + 1 + k < 32) [[likely]] {  // one put for the whole code
      sink.put(((1u << q) - 1) | ((g & mask) << (q + 1)), q + 1 + k);
    } else {
      sink.put_unary(q);
      sink.put(g & mask, k);
    }
  }
  return sink.flush();
}

// libstreamvbyte's layout: (n + 3) / 4 control bytes (2 bits per value: byte count - 1, value
// i at bits 2 * (i % 4) of byte i / 4), then each value's 1-4 little-endian bytes.
WC_HD inline uint8_t* write_streamvbyte_gaps(uint8_t* p, const uint32_t* positions, uint32_t n) {
  const uint32_t control = (n + 3) / 4;
  for (uint32_t c = 0; c < control; ++c) p[c] = 0;
  uint8_t* data = p + control;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t g = gap_at(positions, i);
    const unsigned bytes = g < (1u << 8) ? 1 : g < (1u << 16) ? 2 : g < (1u << 24) ? 3 : 4;
    p[i / 4] = static_cast<uint8_t>(p[i / 4] | ((bytes - 1) << (2 * (i % 4))));
    for (unsigned b = 0; b < bytes; ++b, g >>= 8) *data++ = static_cast<uint8_t>(g);
  }
  return data;
}

WC_HD inline uint8_t* write_bitmap(uint8_t* p, const uint32_t* positions, uint32_t n,
                                   uint32_t length) {
  const uint32_t size = static_cast<uint32_t>(bitmap_bytes(length));
  for (uint32_t b = 0; b < size; ++b) p[b] = 0;
  for (uint32_t i = 0; i < n; ++i)
    p[positions[i] / 8] = static_cast<uint8_t>(p[positions[i] / 8] | (1u << (positions[i] % 8)));
  return p + size;
}

// The values section: exception count, low bits, exception indices, high bits, each padded
// to a byte.
WC_HD inline uint8_t* write_values(uint8_t* p, const uint32_t* values, uint32_t n, unsigned w,
                                   unsigned bits, uint32_t exceptions) {
  store_le32(p, exceptions);
  p += 4;
  const uint32_t mask = bit_mask(bits);
  BitSink low(p);
  for (uint32_t i = 0; i < n; ++i) low.put(values[i] & mask, bits);
  p = low.flush();
  if (exceptions == 0) return p;
  const unsigned iw = index_bits(n);
  BitSink idx(p);
  for (uint32_t i = 0; i < n; ++i)
    if (values[i] > mask) idx.put(i, iw);
  p = idx.flush();
  BitSink high(p);
  for (uint32_t i = 0; i < n; ++i)
    if (values[i] > mask) high.put(values[i] >> bits, w - bits);
  return high.flush();
}

// Writes the whole chunk planned by plan_chunk (plan.total_bytes bytes) at `out`; `new_chunk`
// holds the chunk's new elements (read only for raw chunks).
WC_HD inline uint8_t* write_chunk(uint8_t* out, const ChunkPlan& plan, const uint32_t* positions,
                                  const uint32_t* values, const uint8_t* new_chunk, uint32_t length,
                                  unsigned elem_size) {
  if (plan.changed == 0) return out;
  uint8_t* p = write_chunk_header(out, plan);
  switch (static_cast<ChunkMode>(plan.mode)) {
    case ChunkMode::kGapsRice:
      p = write_rice_gaps(p, positions, plan.changed, plan.rice_k);
      break;
    case ChunkMode::kGapsStreamVByte:
      p = write_streamvbyte_gaps(p, positions, plan.changed);
      break;
    case ChunkMode::kBitmap:
      p = write_bitmap(p, positions, plan.changed, length);
      break;
    default:
      for (uint64_t b = 0; b < uint64_t{length} * elem_size; ++b) *p++ = new_chunk[b];
      return p;
  }
  return write_values(p, values, plan.changed, elem_size * 8, plan.value_bits, plan.exceptions);
}

}  // namespace weightcast::hd
