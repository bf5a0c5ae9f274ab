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
  uint8_t* entries;
};

inline CaptureOut capture_out(uint8_t* capture, uint32_t n) {
  return {reinterpret_cast<uint32_t*>(capture), capture + capture_entries_offset(n)};
}

// Entry k: for 1- and 2-byte elements one word, position | old << 16 | new << 32; for 4-byte
// ones two, position | old << 32 and new.
template <typename U>
inline void store_entry(uint8_t* entries, uint32_t k, uint32_t position, U old_value, U new_value) {
  uint8_t* at = entries + size_t{k} * capture_entry_bytes(sizeof(U));
  if constexpr (sizeof(U) <= 2) {
    const uint64_t word = position | uint64_t{old_value} << 16 | uint64_t{new_value} << 32;
    std::memcpy(at, &word, 8);
  } else {
    const uint64_t words[2] = {position | uint64_t{old_value} << 32, new_value};
    std::memcpy(at, words, 16);
  }
}

template <typename U>
inline void load_entry(const uint8_t* entries, uint32_t k, uint32_t* position, uint32_t* old_bits,
                       uint32_t* new_bits) {
  const uint8_t* at = entries + size_t{k} * capture_entry_bytes(sizeof(U));
  uint64_t words[2];
  std::memcpy(words, at, capture_entry_bytes(sizeof(U)));
  *position = static_cast<uint16_t>(words[0]);
  if constexpr (sizeof(U) <= 2) {
    *old_bits = static_cast<U>(words[0] >> 16);
    *new_bits = static_cast<U>(words[0] >> 32);
  } else {
    *old_bits = static_cast<uint32_t>(words[0] >> 32);
    *new_bits = static_cast<uint32_t>(words[1]);
  }
}

// At a block that starts a window: the changes before it.
inline void mark_window(const CaptureOut& out, uint32_t j, uint32_t spilled) {
  if (j % kCaptureWindow == 0) out.window_first[j / kCaptureWindow] = spilled;
}

// From element j (a block boundary) on, with `spilled` changes captured before it: element by
// element.
template <typename U>
uint32_t capture_portable(uint8_t* live, const uint8_t* fresh, uint32_t n, const CaptureOut& out,
                          uint32_t j = 0, uint32_t spilled = 0) {
  for (; j < n; ++j) {
    if (j % kLanes<U> == 0) mark_window(out, j, spilled);
    const U o = load_elem<U>(live, j), v = load_elem<U>(fresh, j);
    if (o != v) {
      store_entry<U>(out.entries, spilled++, j % kCaptureWindow, o, v);
      std::memcpy(live + size_t{j} * sizeof(U), &v, sizeof(U));
    }
  }
  return spilled;
}

#if defined(__x86_64__)
// The block's lanes that differ, one bit a lane: two 32-byte compares packed to a mask.
template <typename U>
__attribute__((target("avx2"))) inline uint64_t changed_lanes(__m256i x0, __m256i x1, __m256i y0,
                                                              __m256i y1) {
  constexpr uint64_t kAll = kLanes<U> == 64 ? ~uint64_t{0} : (uint64_t{1} << kLanes<U>)-1;
  uint64_t equal;
  if constexpr (sizeof(U) == 1) {
    equal = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x0, y0))) |
            uint64_t{static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x1, y1)))} << 32;
  } else if constexpr (sizeof(U) == 2) {
    // Words packed to bytes per 128-bit half (e0 lo, e1 lo, e0 hi, e1 hi), then reordered.
    const __m256i packed =
        _mm256_packs_epi16(_mm256_cmpeq_epi16(x0, y0), _mm256_cmpeq_epi16(x1, y1));
    equal = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_permute4x64_epi64(packed, 0xD8)));
  } else {
    equal =
        static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x0, y0)))) |
        static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x1, y1))))
            << 8;
  }
  return ~equal & kAll;
}

// AVX2 (on AVX-512 CPUs too), 64-byte blocks. AVX2 has no compress, and a branch on whether a
// block changed is mispredicted in about a quarter of the blocks at 1 % density of bf16,
// stalling the loads in flight (3.4 x a warm copy on Zen 3). So the lowest changed lane's entry
// is stored whether or not the block changed, and kept by advancing the count only when it
// did; the loop branches on the data only for a block with a second change (4 % of blocks at
// that density), whose other lanes are then taken one by one.
template <typename U>
__attribute__((target("avx2,bmi"))) uint32_t capture_avx2(uint8_t* __restrict live,
                                                          const uint8_t* __restrict fresh,
                                                          uint32_t n, const CaptureOut& out) {
  uint8_t* __restrict entries = out.entries;
  // Stands in for the lowest changed lane when none changed: an address inside the block.
  constexpr uint64_t kLastLane = uint64_t{1} << (kLanes<U> - 1);
  uint32_t spilled = 0, j = 0;
  for (; j + kLanes<U> <= n; j += kLanes<U>) {
    mark_window(out, j, spilled);
    uint8_t* pa = live + size_t{j} * sizeof(U);
    const uint8_t* pb = fresh + size_t{j} * sizeof(U);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 32));
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32));
    const uint64_t m = changed_lanes<U>(x0, x1, y0, y1);
    const auto lane = static_cast<uint32_t>(__builtin_ctzll(m | kLastLane));
    // The old value is read before the new ones are stored over it.
    const U o = load_elem<U>(pa, lane), v = load_elem<U>(pb, lane);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pa), y0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pa + 32), y1);
    store_entry<U>(entries, spilled, (j + lane) % kCaptureWindow, o, v);
    spilled += m != 0;
    uint64_t rest = m & (m - 1);
    if (__builtin_expect(rest != 0, 0)) {
      // `live` holds the new values now: the old ones come from the registers.
      alignas(32) uint8_t old[64];
      _mm256_store_si256(reinterpret_cast<__m256i*>(old), x0);
      _mm256_store_si256(reinterpret_cast<__m256i*>(old + 32), x1);
      do {
        const auto k = static_cast<uint32_t>(__builtin_ctzll(rest));
        store_entry<U>(entries, spilled++, (j + k) % kCaptureWindow, load_elem<U>(old, k),
                       load_elem<U>(pb, k));
        rest &= rest - 1;
      } while (rest != 0);
    }
  }
  return capture_portable<U>(live, fresh, n, out, j, spilled);
}
#endif

template <typename U>
uint32_t capture_dispatch(uint8_t* live, const uint8_t* fresh, uint32_t n, uint8_t* capture) {
  const CaptureOut out = capture_out(capture, n);
  uint32_t total;
#if defined(__x86_64__)
  if (cpu_has_avx2()) {
    total = capture_avx2<U>(live, fresh, n, out);
  } else
#endif
  {
    total = capture_portable<U>(live, fresh, n, out);
  }
  out.window_first[capture_windows(n)] = total;
  return total;
}

// Positions in order with the window's base added, and the values widened.
template <typename U>
uint32_t expand_typed(const uint8_t* capture, uint32_t n, uint32_t* positions, uint32_t* old_bits,
                      uint32_t* new_bits) {
  const CaptureOut in = capture_out(const_cast<uint8_t*>(capture), n);
  const uint32_t windows = capture_windows(n);
  for (uint32_t w = 0; w < windows; ++w) {
    for (uint32_t k = in.window_first[w]; k < in.window_first[w + 1]; ++k) {
      load_entry<U>(in.entries, k, &positions[k], &old_bits[k], &new_bits[k]);
      positions[k] += w * kCaptureWindow;
    }
  }
  return in.window_first[windows];
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
