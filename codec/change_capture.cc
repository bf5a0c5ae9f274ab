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
// Blocks never straddle a window: a window is a whole number of blocks of any element size.
static_assert(kCaptureWindow % 64 == 0);

template <typename U>
inline U load_elem(const uint8_t* p, uint32_t i) {
  U v;
  std::memcpy(&v, p + size_t{i} * sizeof(U), sizeof(U));  // no alignment assumed
  return v;
}

// Where a capture's parts are (change_capture.h).
struct CaptureOut {
  uint32_t* window_first;  // changes before each window; [windows] is the total
  uint16_t* positions;     // within the window
  uint8_t* old_spill;
  uint8_t* new_spill;
};

template <typename U>
CaptureOut capture_out(uint8_t* capture, uint32_t n) {
  return {reinterpret_cast<uint32_t*>(capture),
          reinterpret_cast<uint16_t*>(capture + capture_positions_offset(n)),
          capture + capture_spill_offset(n, sizeof(U)),
          capture + capture_new_spill_offset(n, sizeof(U))};
}

// At a block that starts a window: the changes before it.
inline void mark_window(const CaptureOut& out, uint32_t j, uint32_t spilled) {
  if (j % kCaptureWindow == 0) out.window_first[j / kCaptureWindow] = spilled;
}

// Elements [j, j + count) with count <= one block, one by one: spills the changed ones at
// index *spilled on and copies the new values.
template <typename U>
void capture_elements(uint8_t* live, const uint8_t* fresh, uint32_t j, uint32_t count,
                      const CaptureOut& out, uint32_t* spilled) {
  for (uint32_t i = 0; i < count; ++i) {
    const U o = load_elem<U>(live, j + i), v = load_elem<U>(fresh, j + i);
    if (o != v) {
      out.positions[*spilled] = static_cast<uint16_t>((j + i) % kCaptureWindow);
      std::memcpy(out.old_spill + size_t{*spilled} * sizeof(U), &o, sizeof(U));
      std::memcpy(out.new_spill + size_t{(*spilled)++} * sizeof(U), &v, sizeof(U));
      std::memcpy(live + size_t{j + i} * sizeof(U), &v, sizeof(U));
    }
  }
}

// From element j (a block boundary) on, with `spilled` changes captured before it.
template <typename U>
uint32_t capture_portable(uint8_t* live, const uint8_t* fresh, uint32_t n, const CaptureOut& out,
                          uint32_t j = 0, uint32_t spilled = 0) {
  for (; j < n; j += kLanes<U>) {
    mark_window(out, j, spilled);
    capture_elements<U>(live, fresh, j, n - j < kLanes<U> ? n - j : kLanes<U>, out, &spilled);
  }
  return spilled;
}

#if defined(__x86_64__)
// AVX2 (and AVX-512 CPUs without VBMI2): a block is two 32-byte compares, the lanes' equal mask
// packed to one bit per lane; a block that changed is captured lane by lane.
template <typename U>
__attribute__((target("avx2"))) uint32_t capture_avx2(uint8_t* __restrict live,
                                                      const uint8_t* __restrict fresh, uint32_t n,
                                                      const CaptureOut& out) {
  constexpr uint64_t kAll = kLanes<U> == 64 ? ~uint64_t{0} : (uint64_t{1} << kLanes<U>)-1;
  uint16_t* __restrict positions = out.positions;
  uint8_t* __restrict old_spill = out.old_spill;
  uint8_t* __restrict new_spill = out.new_spill;
  alignas(32) uint8_t old[64];
  uint32_t spilled = 0, j = 0;
  for (; j + kLanes<U> <= n; j += kLanes<U>) {
    mark_window(out, j, spilled);
    uint8_t* pa = live + size_t{j} * sizeof(U);
    const uint8_t* pb = fresh + size_t{j} * sizeof(U);
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
    if (m == 0) continue;
    _mm256_store_si256(reinterpret_cast<__m256i*>(old), x0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(old + 32), x1);
    do {
      const auto lane = static_cast<uint32_t>(__builtin_ctzll(m));
      positions[spilled] = static_cast<uint16_t>((j + lane) % kCaptureWindow);
      std::memcpy(old_spill + size_t{spilled} * sizeof(U), old + lane * sizeof(U), sizeof(U));
      std::memcpy(new_spill + size_t{spilled++} * sizeof(U), pb + lane * sizeof(U), sizeof(U));
      m &= m - 1;
    } while (m != 0);
  }
  return capture_portable<U>(live, fresh, n, out, j, spilled);
}

// 16 or 64 bytes of a compressed register at `at`: the short store when the `k` lanes that
// count fit (nearly every block at a step's densities; the stores, not the compares, bound
// the loop).
__attribute__((target("avx512f"))) inline void store_packed(uint8_t* at, __m512i packed,
                                                            bool short_store) {
  if (__builtin_expect(short_store, 1)) {
    // The low 128 bits through an extract and a plain store: a masked store took half the
    // loop's time on Zen 4 (bench/codec_microbench, CaptureAndCopy). The zero-masking forms
    // here and below: the plain ones trip GCC 12's -Wmaybe-uninitialized inside its headers.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at),
                     _mm512_maskz_extracti32x4_epi32(0xF, packed, 0));
  } else {
    _mm512_storeu_si512(at, packed);
  }
}

// AVX-512 F + BW + VBMI2: per block one compare to a lane mask, the old values, the new ones
// and the lanes' 16-bit positions (a register of indices that advances by a block each step,
// wrapping at the window) compressed in registers and stored at their arrays' ends. No
// software prefetch: measured on Zen 4 it slowed the loop (the hardware's stream prefetch
// already runs ahead of two sequential streams).
template <typename U>
__attribute__((target("avx512f,avx512bw,avx512vbmi2"))) uint32_t capture_avx512(
    uint8_t* __restrict live, const uint8_t* __restrict fresh, uint32_t n, const CaptureOut& out) {
  uint16_t* __restrict positions = out.positions;
  uint8_t* __restrict old_spill = out.old_spill;
  uint8_t* __restrict new_spill = out.new_spill;
  // 16-bit lane i: i (the block's first 32 lanes; 1-byte elements use a second register).
  const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                        16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i step = _mm512_set1_epi16(static_cast<int16_t>(kLanes<U>));
  __m512i index = iota;
  __m512i index_high = _mm512_add_epi16(iota, _mm512_set1_epi16(32));
  uint32_t spilled = 0, j = 0;
  for (; j + kLanes<U> <= n; j += kLanes<U>) {
    mark_window(out, j, spilled);
    uint8_t* pa = live + size_t{j} * sizeof(U);
    const uint8_t* pb = fresh + size_t{j} * sizeof(U);
    const __m512i x = _mm512_loadu_si512(pa);
    const __m512i y = _mm512_loadu_si512(pb);
    _mm512_storeu_si512(pa, y);
    uint64_t m;
    __m512i old_packed, new_packed;
    uint16_t* at = positions + spilled;
    if constexpr (sizeof(U) == 1) {
      m = _mm512_cmpneq_epu8_mask(x, y);
      old_packed = _mm512_maskz_compress_epi8(m, x);
      new_packed = _mm512_maskz_compress_epi8(m, y);
      const auto low = static_cast<__mmask32>(m);
      _mm512_storeu_si512(at, _mm512_maskz_compress_epi16(low, index));
      _mm512_storeu_si512(at + __builtin_popcount(low),
                          _mm512_maskz_compress_epi16(static_cast<__mmask32>(m >> 32), index_high));
      index_high = _mm512_add_epi16(index_high, step);
    } else {
      __mmask32 lanes;
      if constexpr (sizeof(U) == 2) {
        lanes = _mm512_cmpneq_epu16_mask(x, y);
        old_packed = _mm512_maskz_compress_epi16(lanes, x);
        new_packed = _mm512_maskz_compress_epi16(lanes, y);
      } else {
        const __mmask16 words = _mm512_cmpneq_epu32_mask(x, y);
        old_packed = _mm512_maskz_compress_epi32(words, x);
        new_packed = _mm512_maskz_compress_epi32(words, y);
        lanes = words;
      }
      m = lanes;
      // 16 bytes hold 8 positions: as many as the short value stores hold for 2-byte
      // elements, twice as many for 4-byte ones.
      store_packed(reinterpret_cast<uint8_t*>(at), _mm512_maskz_compress_epi16(lanes, index),
                   __builtin_popcount(lanes) <= 8);
    }
    index = _mm512_add_epi16(index, step);
    const auto k = static_cast<uint32_t>(__builtin_popcountll(m));
    const bool short_store = k <= 16 / sizeof(U);
    store_packed(old_spill + size_t{spilled} * sizeof(U), old_packed, short_store);
    store_packed(new_spill + size_t{spilled} * sizeof(U), new_packed, short_store);
    spilled += k;
  }
  return capture_portable<U>(live, fresh, n, out, j, spilled);
}

// `count` 16-bit positions of window w, or values of U, widened to 32 bits.
template <typename U>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void widen_avx512(const uint8_t* in,
                                                                       uint32_t count, uint32_t add,
                                                                       uint32_t* out) {
  const __m512i offset = _mm512_set1_epi32(static_cast<int>(add));
  for (uint32_t k = 0; k < count; k += 16) {
    const auto keep = static_cast<__mmask16>(count - k >= 16 ? 0xFFFF : (1u << (count - k)) - 1);
    __m512i v;
    if constexpr (sizeof(U) == 1) {
      v = _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_maskz_loadu_epi8(keep, in + k));
    } else if constexpr (sizeof(U) == 2) {
      v = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(keep, in + size_t{k} * 2));
    } else {
      v = _mm512_maskz_loadu_epi32(keep, in + size_t{k} * 4);
    }
    _mm512_mask_storeu_epi32(out + k, keep, _mm512_add_epi32(v, offset));
  }
}
#endif

template <typename U>
uint32_t capture_dispatch(uint8_t* live, const uint8_t* fresh, uint32_t n, uint8_t* capture) {
  const CaptureOut out = capture_out<U>(capture, n);
  uint32_t total;
#if defined(__x86_64__)
  if (cpu_has_avx512vbmi2()) {
    total = capture_avx512<U>(live, fresh, n, out);
  } else if (cpu_has_avx2()) {
    total = capture_avx2<U>(live, fresh, n, out);
  } else
#endif
  {
    total = capture_portable<U>(live, fresh, n, out);
  }
  out.window_first[capture_windows(n)] = total;
  return total;
}

// Positions in order, the window's base added, and the values widened.
template <typename U>
uint32_t expand_typed(const uint8_t* capture, uint32_t n, uint32_t* positions, uint32_t* old_bits,
                      uint32_t* new_bits) {
  const CaptureOut in = capture_out<U>(const_cast<uint8_t*>(capture), n);
  const uint32_t windows = capture_windows(n);
  const uint32_t total = in.window_first[windows];
#if defined(__x86_64__)
  if (cpu_has_avx512vbmi2()) {
    for (uint32_t w = 0; w < windows; ++w) {
      const uint32_t first = in.window_first[w];
      widen_avx512<uint16_t>(reinterpret_cast<const uint8_t*>(in.positions + first),
                             in.window_first[w + 1] - first, w * kCaptureWindow, positions + first);
    }
    widen_avx512<U>(in.old_spill, total, 0, old_bits);
    widen_avx512<U>(in.new_spill, total, 0, new_bits);
    return total;
  }
#endif
  for (uint32_t w = 0; w < windows; ++w) {
    for (uint32_t k = in.window_first[w]; k < in.window_first[w + 1]; ++k) {
      positions[k] = w * kCaptureWindow + in.positions[k];
    }
  }
  for (uint32_t k = 0; k < total; ++k) {
    old_bits[k] = load_elem<U>(in.old_spill, k);
    new_bits[k] = load_elem<U>(in.new_spill, k);
  }
  return total;
}

}  // namespace

uint32_t capture_and_copy_changes(uint8_t* live, const uint8_t* new_bytes, uint32_t n,
                                  size_t elem_size, uint8_t* capture) {
  return kernels::dispatch(
      elem_size, [&]<typename U>() { return capture_dispatch<U>(live, new_bytes, n, capture); });
}

uint32_t expand_capture(const uint8_t* capture, uint32_t n, size_t elem_size, uint32_t* positions,
                        uint32_t* old_bits, uint32_t* new_bits) {
  return kernels::dispatch(elem_size, [&]<typename U>() {
    return expand_typed<U>(capture, n, positions, old_bits, new_bits);
  });
}

}  // namespace weightcast
