// Patched bit-packing of a chunk's change values.
//
// A value is zigzag(new_bits - old_bits mod 2^w) - 1 (never negative: a changed element has a
// non-zero difference). Most bf16 updates move 1-2 ULP, so values are tiny, but a weight that
// crosses zero flips the sign bit and gives a value near 2^w: a plain width per chunk would
// be ruined by those. So every value is stored in `bits` low bits, and the few that do not
// fit are exceptions whose index and high bits are stored after (FORMATS.md "values").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/base/status.h"
#include "codec/hd.h"

namespace weightcast {

// zigzag(d) - 1 for a w-bit difference d != 0, and back.
WC_HD inline uint32_t value_from_diff(uint32_t diff, unsigned w) {
  const uint32_t mask = w >= 32 ? 0xFFFFFFFFu : (1u << w) - 1;
  diff &= mask;
  const uint32_t sign = (diff >> (w - 1)) & 1u;
  const uint32_t zz = ((diff << 1) ^ (0u - sign)) & mask;
  return zz - 1;
}
WC_HD inline uint32_t diff_from_value(uint32_t value, unsigned w) {
  const uint32_t zz = value + 1;
  const uint32_t mask = w >= 32 ? 0xFFFFFFFFu : (1u << w) - 1;
  return ((zz >> 1) ^ (0u - (zz & 1u))) & mask;
}
// Largest legal value for a w-bit element (zigzag never yields 0 for d != 0).
WC_HD inline uint32_t max_value(unsigned w) {
  return w >= 32 ? 0xFFFFFFFEu : (1u << w) - 2;
}

struct ValuePackingPlan {
  unsigned bits = 0;        // low bits stored for every value
  uint32_t exceptions = 0;  // values that need more than `bits`
  size_t bytes = 0;         // encoded size of the whole values section
};

// The width that minimises the encoded size of `values` (each at most max_value(w)).
ValuePackingPlan plan_value_packing(std::span<const uint32_t> values, unsigned w);

// Appends the values section: u32 exception count, low bits, exception indices, high bits.
void pack_values(std::span<const uint32_t> values, unsigned w, const ValuePackingPlan& plan,
                 std::vector<uint8_t>* out);

// Decodes exactly `count` values packed with `bits` low bits from `section`, which must be
// consumed exactly. Errors (naming `where`) on truncation, trailing bytes, out-of-order or
// repeated exception indices, or a value above max_value(w).
Status unpack_values(std::span<const uint8_t> section, uint32_t count, unsigned bits, unsigned w,
                     std::vector<uint32_t>* values, const char* where);

// Bits needed to store any index below n (0 when n <= 1).
WC_HD inline unsigned index_bits(uint32_t n) {
  return n <= 1 ? 0u : 32u - wc_clz32(n - 1);
}

}  // namespace weightcast
