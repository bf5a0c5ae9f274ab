#include "codec/change_scan.h"

#include <cstring>

#include "codec/cpu_dispatch.h"

namespace weightcast {
namespace {

// Compares 64 bytes at a time with word XORs (vectorised under the AVX2 clone); only blocks
// that differ are examined element by element, branch-free.
template <typename U>
inline U load_elem(const uint8_t* p, uint32_t i) {
  U v;
  std::memcpy(&v, p + size_t{i} * sizeof(U), sizeof(U));  // no alignment assumed
  return v;
}

template <typename U>
WEIGHTCAST_HOT_LOOP uint32_t scan_typed(const uint8_t* __restrict a, const uint8_t* __restrict b,
                                        uint32_t n, uint32_t* __restrict positions) {
  constexpr uint32_t kLanes = 64 / sizeof(U);
  uint32_t count = 0;
  uint32_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    uint64_t diff = 0;
    for (int w = 0; w < 8; ++w) {
      uint64_t x, y;
      std::memcpy(&x, a + size_t{j} * sizeof(U) + 8 * w, 8);
      std::memcpy(&y, b + size_t{j} * sizeof(U) + 8 * w, 8);
      diff |= x ^ y;
    }
    if (diff == 0) continue;
    for (uint32_t k = 0; k < kLanes; ++k) {
      positions[count] = j + k;
      count += load_elem<U>(a, j + k) != load_elem<U>(b, j + k);
    }
  }
  for (; j < n; ++j) {
    positions[count] = j;
    count += load_elem<U>(a, j) != load_elem<U>(b, j);
  }
  return count;
}

}  // namespace

uint32_t scan_changes(const uint8_t* old_bytes, const uint8_t* new_bytes, uint32_t n,
                      size_t elem_size, uint32_t* positions) {
  switch (elem_size) {
    case 1: return scan_typed<uint8_t>(old_bytes, new_bytes, n, positions);
    case 2: return scan_typed<uint16_t>(old_bytes, new_bytes, n, positions);
    default: return scan_typed<uint32_t>(old_bytes, new_bytes, n, positions);
  }
}

}  // namespace weightcast
