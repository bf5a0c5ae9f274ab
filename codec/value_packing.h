// Patched bit-packing of a chunk's change values.
//
// A value is zigzag(new_bits - old_bits mod 2^w) - 1 (never negative: a changed element has a
// non-zero difference). Most bf16 updates move 1-2 ULP, so values are tiny, but a weight that
// crosses zero flips the sign bit and gives a value near 2^w: a plain width per chunk would
// be ruined by those. So every value is stored in `bits` low bits, and the few that do not
// fit are exceptions whose index and high bits are stored after (FORMATS.md "values"). The
// section is sized by hd::plan_values, written by hd::write_values (chunk_plan_hd.h) and read
// by hd::decode_values (chunk_decode_hd.h).
#pragma once

#include <cstdint>
#include "codec/bit_stream.h"
#include "codec/hd.h"

namespace weightcast {

// zigzag(d) - 1 for a w-bit difference d != 0, and back.
WC_HD inline uint32_t value_from_diff(uint32_t diff, unsigned w) {
  const uint32_t mask = bit_mask(w);
  diff &= mask;
  const uint32_t sign = (diff >> (w - 1)) & 1u;
  const uint32_t zz = ((diff << 1) ^ (0u - sign)) & mask;
  return zz - 1;
}
WC_HD inline uint32_t diff_from_value(uint32_t value, unsigned w) {
  const uint32_t zz = value + 1;
  const uint32_t mask = bit_mask(w);
  return ((zz >> 1) ^ (0u - (zz & 1u))) & mask;
}
// Largest legal value for a w-bit element (zigzag never yields 0 for d != 0).
WC_HD inline uint32_t max_value(unsigned w) {
  return w >= 32 ? 0xFFFFFFFEu : (1u << w) - 2;
}

// Bits needed to store any index below n (0 when n <= 1).
WC_HD inline unsigned index_bits(uint32_t n) {
  return n <= 1 ? 0u : 32u - wc_clz32(n - 1);
}

}  // namespace weightcast
