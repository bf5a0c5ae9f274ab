#include "codec/change_capture.h"

#include <cstring>

#include "codec/cpu_dispatch.h"
#include "codec/delta_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace weightcast {
namespace {

template <typename U>
constexpr uint32_t kLanes = 64 / sizeof(U);

template <typename U>
inline U load_elem(const uint8_t* p, uint32_t i) {
  U v;
  std::memcpy(&v, p + size_t{i} * sizeof(U), sizeof(U));  // no alignment assumed
  return v;
}

// Masks are 32-bit words: two per block of 1-byte elements.
template <typename U>
inline void put_mask(uint32_t* words, uint32_t block, uint64_t m) {
  if constexpr (sizeof(U) == 1) {
    words[2 * block] = static_cast<uint32_t>(m);
    words[2 * block + 1] = static_cast<uint32_t>(m >> 32);
  } else {
    words[block] = static_cast<uint32_t>(m);
  }
}

template <typename U>
inline uint64_t get_mask(const uint32_t* words, uint32_t block) {
  if constexpr (sizeof(U) == 1) {
    return words[2 * block] | uint64_t{words[2 * block + 1]} << 32;
  } else {
    return words[block];
  }
}

// Elements [j, j + count) with count <= one block, one by one: spills the changed ones' old
// values at spill[count_so_far...], copies the new ones, returns the block's mask.
template <typename U>
uint64_t capture_elements(uint8_t* live, const uint8_t* fresh, uint32_t j, uint32_t count,
                          uint8_t* spill, uint32_t* spilled) {
  uint64_t m = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const U o = load_elem<U>(live, j + i), v = load_elem<U>(fresh, j + i);
    if (o != v) {
      m |= uint64_t{1} << i;
      std::memcpy(spill + size_t{(*spilled)++} * sizeof(U), &o, sizeof(U));
      std::memcpy(live + size_t{j + i} * sizeof(U), &v, sizeof(U));
    }
  }
  return m;
}

template <typename U>
uint32_t capture_portable(uint8_t* live, const uint8_t* fresh, uint32_t n, uint32_t* masks,
                          uint8_t* spill, uint32_t j = 0) {
  uint32_t spilled = 0;
  for (uint32_t b = j / kLanes<U>; j < n; j += kLanes<U>, ++b) {
    const uint32_t count = n - j < kLanes<U> ? n - j : kLanes<U>;
    put_mask<U>(masks, b, capture_elements<U>(live, fresh, j, count, spill, &spilled));
  }
  return spilled;
}

#if defined(__x86_64__)
constexpr size_t kPrefetchBytes = 1024;

// AVX2 (and AVX-512 CPUs without VBMI2): a block is two 32-byte compares, the lanes' equal mask
// packed to one bit per lane; a block that changed spills its old values lane by lane.
template <typename U>
__attribute__((target("avx2"))) uint32_t capture_avx2(uint8_t* __restrict live,
                                                      const uint8_t* __restrict fresh, uint32_t n,
                                                      uint32_t* __restrict masks,
                                                      uint8_t* __restrict spill) {
  constexpr uint64_t kAll = kLanes<U> == 64 ? ~uint64_t{0} : (uint64_t{1} << kLanes<U>)-1;
  alignas(32) uint8_t old[64];
  uint32_t spilled = 0, b = 0, j = 0;
  for (; j + kLanes<U> <= n; j += kLanes<U>, ++b) {
    uint8_t* pa = live + size_t{j} * sizeof(U);
    const uint8_t* pb = fresh + size_t{j} * sizeof(U);
    _mm_prefetch(reinterpret_cast<const char*>(pa + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(pb + kPrefetchBytes), _MM_HINT_T0);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 32));
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pa), y0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pa + 32), y1);
    uint64_t equal;
    if constexpr (sizeof(U) == 1) {
      equal = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x0, y0))) |
              uint64_t{static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x1, y1)))}
                  << 32;
    } else if constexpr (sizeof(U) == 2) {
      // Words packed to bytes per 128-bit half (e0 lo, e1 lo, e0 hi, e1 hi), then reordered.
      const __m256i packed =
          _mm256_packs_epi16(_mm256_cmpeq_epi16(x0, y0), _mm256_cmpeq_epi16(x1, y1));
      equal = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_permute4x64_epi64(packed, 0xD8)));
    } else {
      equal =
          static_cast<uint32_t>(
              _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x0, y0)))) |
          static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x1, y1))))
              << 8;
    }
    uint64_t m = ~equal & kAll;
    put_mask<U>(masks, b, m);
    if (m == 0) continue;
    _mm256_store_si256(reinterpret_cast<__m256i*>(old), x0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(old + 32), x1);
    do {
      const auto lane = static_cast<uint32_t>(__builtin_ctzll(m));
      std::memcpy(spill + size_t{spilled++} * sizeof(U), old + lane * sizeof(U), sizeof(U));
      m &= m - 1;
    } while (m != 0);
  }
  return spilled +
         capture_portable<U>(live, fresh, n, masks, spill + size_t{spilled} * sizeof(U), j);
}

// AVX-512 F + BW + VBMI2: one compare to a lane mask per block and the old values compressed
// in a register, stored (64 bytes, of which the changed lanes count) at the spill's end.
template <typename U>
__attribute__((target("avx512f,avx512bw,avx512vbmi2"))) uint32_t capture_avx512(
    uint8_t* __restrict live, const uint8_t* __restrict fresh, uint32_t n,
    uint32_t* __restrict masks, uint8_t* __restrict spill) {
  uint32_t spilled = 0, b = 0, j = 0;
  for (; j + kLanes<U> <= n; j += kLanes<U>, ++b) {
    uint8_t* pa = live + size_t{j} * sizeof(U);
    const uint8_t* pb = fresh + size_t{j} * sizeof(U);
    _mm_prefetch(reinterpret_cast<const char*>(pa + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(pb + kPrefetchBytes), _MM_HINT_T0);
    const __m512i x = _mm512_loadu_si512(pa);
    const __m512i y = _mm512_loadu_si512(pb);
    _mm512_storeu_si512(pa, y);
    uint64_t m;
    __m512i packed;
    if constexpr (sizeof(U) == 1) {
      m = _mm512_cmpneq_epu8_mask(x, y);
      packed = _mm512_maskz_compress_epi8(m, x);
    } else if constexpr (sizeof(U) == 2) {
      m = _mm512_cmpneq_epu16_mask(x, y);
      packed = _mm512_maskz_compress_epi16(static_cast<__mmask32>(m), x);
    } else {
      m = _mm512_cmpneq_epu32_mask(x, y);
      packed = _mm512_maskz_compress_epi32(static_cast<__mmask16>(m), x);
    }
    _mm512_storeu_si512(spill + size_t{spilled} * sizeof(U), packed);
    put_mask<U>(masks, b, m);
    spilled += static_cast<uint32_t>(__builtin_popcountll(m));
  }
  return spilled +
         capture_portable<U>(live, fresh, n, masks, spill + size_t{spilled} * sizeof(U), j);
}
#endif

template <typename U>
uint32_t capture_dispatch(uint8_t* live, const uint8_t* fresh, uint32_t n, uint8_t* capture) {
  auto* masks = reinterpret_cast<uint32_t*>(capture);
  uint8_t* spill = capture + capture_spill_offset(n, sizeof(U));
#if defined(__x86_64__)
  if (cpu_has_avx512vbmi2()) return capture_avx512<U>(live, fresh, n, masks, spill);
  if (cpu_has_avx2()) return capture_avx2<U>(live, fresh, n, masks, spill);
#endif
  return capture_portable<U>(live, fresh, n, masks, spill);
}

template <typename U>
uint32_t expand_typed(const uint8_t* capture, uint32_t n, uint32_t* positions, uint32_t* old_bits) {
  const auto* masks = reinterpret_cast<const uint32_t*>(capture);
  const uint8_t* spill = capture + capture_spill_offset(n, sizeof(U));
  const uint32_t blocks = capture_blocks(n, sizeof(U));
  uint32_t count = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    for (uint64_t m = get_mask<U>(masks, b); m != 0; m &= m - 1) {
      positions[count] = b * kLanes<U> + static_cast<uint32_t>(__builtin_ctzll(m));
      old_bits[count] = load_elem<U>(spill, count);
      ++count;
    }
  }
  return count;
}

}  // namespace

uint32_t capture_and_copy_changes(uint8_t* live, const uint8_t* new_bytes, uint32_t n,
                                  size_t elem_size, uint8_t* capture) {
  return kernels::dispatch(
      elem_size, [&]<typename U>() { return capture_dispatch<U>(live, new_bytes, n, capture); });
}

uint32_t expand_capture(const uint8_t* capture, uint32_t n, size_t elem_size, uint32_t* positions,
                        uint32_t* old_bits) {
  return kernels::dispatch(
      elem_size, [&]<typename U>() { return expand_typed<U>(capture, n, positions, old_bits); });
}

}  // namespace weightcast
