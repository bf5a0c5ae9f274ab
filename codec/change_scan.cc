#include "codec/change_scan.h"

#include <cstring>

#include "codec/cpu_dispatch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace weightcast {
namespace {

template <typename U>
inline U load_elem(const uint8_t* p, uint32_t i) {
  U v;
  std::memcpy(&v, p + size_t{i} * sizeof(U), sizeof(U));  // no alignment assumed
  return v;
}

// One bit per element in a 64-bit byte mask: bit 0 of each element's bytes.
template <typename U>
constexpr uint64_t kLaneBits = sizeof(U) == 1   ? ~uint64_t{0}
                               : sizeof(U) == 2 ? 0x5555555555555555ull
                                                : 0x1111111111111111ull;

// Scans 64 bytes per step. Equal blocks (the vast majority at optimizer-step densities) cost
// four compares; a block that differs yields a bitmask of its changed elements, and only set
// bits are visited, so the work beyond the memory scan is proportional to the changes.
template <typename U>
uint32_t scan_typed(const uint8_t* __restrict a, const uint8_t* __restrict b, uint32_t n,
                    uint32_t* __restrict positions, uint32_t base = 0) {
  constexpr uint32_t kLanes = 64 / sizeof(U);
  uint32_t count = 0;
  uint32_t j = 0;
#if defined(__SSE2__)
  for (; j + kLanes <= n; j += kLanes) {
    const uint8_t* pa = a + size_t{j} * sizeof(U);
    const uint8_t* pb = b + size_t{j} * sizeof(U);
    uint64_t equal = 0;
    for (int q = 0; q < 4; ++q) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pa + 16 * q));
      const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 16 * q));
      __m128i eq;
      if constexpr (sizeof(U) == 1)
        eq = _mm_cmpeq_epi8(x, y);
      else if constexpr (sizeof(U) == 2)
        eq = _mm_cmpeq_epi16(x, y);
      else
        eq = _mm_cmpeq_epi32(x, y);
      equal |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(eq))) << (16 * q);
    }
    uint64_t changed = ~equal & kLaneBits<U>;
    while (changed != 0) {
      positions[count++] = base + j + static_cast<uint32_t>(__builtin_ctzll(changed)) / sizeof(U);
      changed &= changed - 1;
    }
  }
#endif
  for (; j < n; ++j) {
    positions[count] = base + j;
    count += load_elem<U>(a, j) != load_elem<U>(b, j);
  }
  return count;
}

#if defined(__x86_64__)
// The AVX2 variant of the loop above: 64 bytes are two 32-byte compares. Both streams are
// prefetched ahead explicitly; prefetching past the end of a buffer is harmless.
constexpr size_t kPrefetchBytes = 1024;
template <typename U>
__attribute__((target("avx2"))) uint32_t scan_avx2(const uint8_t* __restrict a,
                                                   const uint8_t* __restrict b, uint32_t n,
                                                   uint32_t* __restrict positions) {
  constexpr uint32_t kLanes = 64 / sizeof(U);
  uint32_t count = 0;
  uint32_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const uint8_t* pa = a + size_t{j} * sizeof(U);
    const uint8_t* pb = b + size_t{j} * sizeof(U);
    _mm_prefetch(reinterpret_cast<const char*>(pa + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(pb + kPrefetchBytes), _MM_HINT_T0);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa));
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 32));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32));
    __m256i e0, e1;
    if constexpr (sizeof(U) == 1) {
      e0 = _mm256_cmpeq_epi8(x0, y0);
      e1 = _mm256_cmpeq_epi8(x1, y1);
    } else if constexpr (sizeof(U) == 2) {
      e0 = _mm256_cmpeq_epi16(x0, y0);
      e1 = _mm256_cmpeq_epi16(x1, y1);
    } else {
      e0 = _mm256_cmpeq_epi32(x0, y0);
      e1 = _mm256_cmpeq_epi32(x1, y1);
    }
    if (_mm256_testc_si256(_mm256_and_si256(e0, e1), _mm256_set1_epi8(-1))) continue;
    const uint64_t equal = static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(e0))) |
                           static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(e1)))
                               << 32;
    uint64_t changed = ~equal & kLaneBits<U>;
    while (changed != 0) {
      positions[count++] = j + static_cast<uint32_t>(__builtin_ctzll(changed)) / sizeof(U);
      changed &= changed - 1;
    }
  }
  return count + scan_typed<U>(a + size_t{j} * sizeof(U), b + size_t{j} * sizeof(U), n - j,
                               positions + count, j);
}
#endif

}  // namespace

uint32_t scan_changes(const uint8_t* old_bytes, const uint8_t* new_bytes, uint32_t n,
                      size_t elem_size, uint32_t* positions) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) {
    switch (elem_size) {
      case 1:
        return scan_avx2<uint8_t>(old_bytes, new_bytes, n, positions);
      case 2:
        return scan_avx2<uint16_t>(old_bytes, new_bytes, n, positions);
      default:
        return scan_avx2<uint32_t>(old_bytes, new_bytes, n, positions);
    }
  }
#endif
  switch (elem_size) {
    case 1:
      return scan_typed<uint8_t>(old_bytes, new_bytes, n, positions);
    case 2:
      return scan_typed<uint16_t>(old_bytes, new_bytes, n, positions);
    default:
      return scan_typed<uint32_t>(old_bytes, new_bytes, n, positions);
  }
}

}  // namespace weightcast
