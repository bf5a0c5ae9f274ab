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
// The changed elements of a 64-byte block (x = old, y = new, two halves each) as bit 0 of each
// element's bytes in a 64-bit byte mask (kLaneBits); 0 when the block is unchanged, which
// costs two compares and a test.
template <typename U>
__attribute__((target("avx2"))) inline uint64_t changed_lanes_avx2(__m256i x0, __m256i y0,
                                                                   __m256i x1, __m256i y1) {
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
  if (_mm256_testc_si256(_mm256_and_si256(e0, e1), _mm256_set1_epi8(-1))) return 0;
  const uint64_t equal = static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(e0))) |
                         static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(e1)))
                             << 32;
  return ~equal & kLaneBits<U>;
}

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
    uint64_t changed = changed_lanes_avx2<U>(x0, y0, x1, y1);
    if (changed == 0) continue;
    while (changed != 0) {
      positions[count++] = j + static_cast<uint32_t>(__builtin_ctzll(changed)) / sizeof(U);
      changed &= changed - 1;
    }
  }
  return count + scan_typed<U>(a + size_t{j} * sizeof(U), b + size_t{j} * sizeof(U), n - j,
                               positions + count, j);
}
#endif

// scan_and_copy_changes, portable: branch-free bookkeeping per element.
template <typename U>
uint32_t scan_copy_typed(uint8_t* __restrict live, const uint8_t* __restrict fresh, uint32_t n,
                         uint32_t* __restrict positions, uint32_t* __restrict old_bits,
                         uint32_t base = 0) {
  uint32_t count = 0;
  for (uint32_t j = 0; j < n; ++j) {
    const U o = load_elem<U>(live, j);
    const U v = load_elem<U>(fresh, j);
    std::memcpy(live + size_t{j} * sizeof(U), &v, sizeof(U));
    positions[count] = base + j;
    old_bits[count] = o;
    count += o != v;
  }
  return count;
}

#if defined(__x86_64__)
// AVX2: 64 bytes a step, stored as they are compared; a block that differs is spilled once so
// its changed lanes' old bits can be read back.
template <typename U>
__attribute__((target("avx2"))) uint32_t scan_copy_avx2(uint8_t* __restrict live,
                                                        const uint8_t* __restrict fresh, uint32_t n,
                                                        uint32_t* __restrict positions,
                                                        uint32_t* __restrict old_bits) {
  constexpr uint32_t kLanes = 64 / sizeof(U);
  uint32_t count = 0;
  uint32_t j = 0;
  alignas(32) uint8_t spill[64];
  for (; j + kLanes <= n; j += kLanes) {
    uint8_t* pa = live + size_t{j} * sizeof(U);
    const uint8_t* pb = fresh + size_t{j} * sizeof(U);
    _mm_prefetch(reinterpret_cast<const char*>(pa + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(pb + kPrefetchBytes), _MM_HINT_T0);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa));
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 32));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pa), y0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pa + 32), y1);
    uint64_t changed = changed_lanes_avx2<U>(x0, y0, x1, y1);
    if (changed == 0) continue;
    _mm256_store_si256(reinterpret_cast<__m256i*>(spill), x0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(spill + 32), x1);
    while (changed != 0) {
      const uint32_t lane = static_cast<uint32_t>(__builtin_ctzll(changed)) / sizeof(U);
      positions[count] = j + lane;
      old_bits[count++] = load_elem<U>(spill, lane);
      changed &= changed - 1;
    }
  }
  return count + scan_copy_typed<U>(live + size_t{j} * sizeof(U), fresh + size_t{j} * sizeof(U),
                                    n - j, positions + count, old_bits + count, j);
}

// GCC 12 warns that the undefined vectors inside its own widening and extracting intrinsics
// "may be used uninitialized"; they are never read.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// AVX-512 (F + BW): one 64-byte compare to a lane mask; the changed lanes' indices and old bits
// are compressed 16 at a time into the outputs, so no loop runs per change. Each group's
// 16-entry stores land at or below the block's end (count <= j + 16 g), inside the n entries.
template <typename U>
__attribute__((target("avx512f,avx512bw"))) uint32_t scan_copy_avx512(
    uint8_t* __restrict live, const uint8_t* __restrict fresh, uint32_t n,
    uint32_t* __restrict positions, uint32_t* __restrict old_bits) {
  constexpr uint32_t kLanes = 64 / sizeof(U);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint32_t count = 0;
  uint32_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    uint8_t* pa = live + size_t{j} * sizeof(U);
    const uint8_t* pb = fresh + size_t{j} * sizeof(U);
    _mm_prefetch(reinterpret_cast<const char*>(pa + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(pb + kPrefetchBytes), _MM_HINT_T0);
    const __m512i x = _mm512_loadu_si512(pa);
    const __m512i y = _mm512_loadu_si512(pb);
    _mm512_storeu_si512(pa, y);
    uint64_t changed;
    if constexpr (sizeof(U) == 1) {
      changed = _mm512_cmpneq_epu8_mask(x, y);
    } else if constexpr (sizeof(U) == 2) {
      changed = _mm512_cmpneq_epu16_mask(x, y);
    } else {
      changed = _mm512_cmpneq_epu32_mask(x, y);
    }
    if (changed == 0) continue;
    for (uint32_t g = 0; g < kLanes / 16; ++g) {
      const auto m = static_cast<__mmask16>(changed >> (16 * g));
      if (m == 0) continue;
      __m512i old;
      if constexpr (sizeof(U) == 1) {
        const __m128i q = g == 0   ? _mm512_extracti32x4_epi32(x, 0)
                          : g == 1 ? _mm512_extracti32x4_epi32(x, 1)
                          : g == 2 ? _mm512_extracti32x4_epi32(x, 2)
                                   : _mm512_extracti32x4_epi32(x, 3);
        old = _mm512_cvtepu8_epi32(q);
      } else if constexpr (sizeof(U) == 2) {
        old = _mm512_cvtepu16_epi32(g == 0 ? _mm512_extracti64x4_epi64(x, 0)
                                           : _mm512_extracti64x4_epi64(x, 1));
      } else {
        old = x;
      }
      const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j + 16 * g)), iota);
      _mm512_storeu_si512(positions + count, _mm512_maskz_compress_epi32(m, index));
      _mm512_storeu_si512(old_bits + count, _mm512_maskz_compress_epi32(m, old));
      count += static_cast<uint32_t>(__builtin_popcount(m));
    }
  }
  return count + scan_copy_typed<U>(live + size_t{j} * sizeof(U), fresh + size_t{j} * sizeof(U),
                                    n - j, positions + count, old_bits + count, j);
}
#pragma GCC diagnostic pop
#endif

template <typename U>
uint32_t scan_copy_dispatch(uint8_t* live, const uint8_t* fresh, uint32_t n, uint32_t* positions,
                            uint32_t* old_bits) {
#if defined(__x86_64__)
  if (cpu_has_avx512bw()) return scan_copy_avx512<U>(live, fresh, n, positions, old_bits);
  if (cpu_has_avx2()) return scan_copy_avx2<U>(live, fresh, n, positions, old_bits);
#endif
  return scan_copy_typed<U>(live, fresh, n, positions, old_bits);
}

}  // namespace

uint32_t scan_and_copy_changes(uint8_t* live, const uint8_t* new_bytes, uint32_t n,
                               size_t elem_size, uint32_t* positions, uint32_t* old_bits) {
  switch (elem_size) {
    case 1:
      return scan_copy_dispatch<uint8_t>(live, new_bytes, n, positions, old_bits);
    case 2:
      return scan_copy_dispatch<uint16_t>(live, new_bytes, n, positions, old_bits);
    default:
      return scan_copy_dispatch<uint32_t>(live, new_bytes, n, positions, old_bits);
  }
}

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
