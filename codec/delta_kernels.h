// The per-change inner loops of encode and apply, specialised per element type so that
// element loads and stores are single instructions (a memcpy of a run-time size would be a
// library call per change), with the running sums kept in registers.
#pragma once

#include <cstdint>
#include <cstring>

#include "codec/checksum.h"
#include "codec/value_packing.h"

namespace weightcast::kernels {

// Calls fn.template operator()<U>() with U the unsigned type of `elem_size` bytes (1, 2 or 4),
// so each caller writes its typed loop once: dispatch(es, [&]<typename U>() { ... }).
template <typename F>
decltype(auto) dispatch(size_t elem_size, F&& fn) {
  switch (elem_size) {
    case 1:
      return fn.template operator()<uint8_t>();
    case 2:
      return fn.template operator()<uint16_t>();
    default:
      return fn.template operator()<uint32_t>();
  }
}

template <typename U>
inline U load(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
}
template <typename U>
inline void store(uint8_t* p, U v) {
  std::memcpy(p, &v, sizeof(U));
}
template <typename U>
inline uint64_t change_term(uint64_t global, U old_bits, U new_bits) {
  return (global + 1) * (uint64_t{checksum_fmix32(uint32_t{new_bits} ^ kChecksumSeed32)} -
                         uint64_t{checksum_fmix32(uint32_t{old_bits} ^ kChecksumSeed32)});
}

// values[k] = zigzag(new - old) - 1 at each changed position, with old_at(k) and new_at(k) the
// old and new bits of change k; returns the checksum change.
template <typename U, typename OldAt, typename NewAt>
uint64_t encode_values_from(OldAt old_at, NewAt new_at, const uint32_t* positions, uint32_t n,
                            uint64_t global_first, uint32_t* values) {
  constexpr unsigned w = sizeof(U) * 8;
  uint64_t sum = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const U o = old_at(k);
    const U v = new_at(k);
    values[k] = value_from_diff(static_cast<uint32_t>(static_cast<U>(v - o)), w);
    sum += change_term<U>(global_first + positions[k], o, v);
  }
  return sum;
}

// The old and new values read from `old_bytes` and `new_bytes` at the positions.
template <typename U>
uint64_t encode_values(const uint8_t* old_bytes, const uint8_t* new_bytes,
                       const uint32_t* positions, uint32_t n, uint64_t global_first,
                       uint32_t* values) {
  return encode_values_from<U>(
      [&](uint32_t k) { return load<U>(old_bytes + size_t{positions[k]} * sizeof(U)); },
      [&](uint32_t k) { return load<U>(new_bytes + size_t{positions[k]} * sizeof(U)); }, positions,
      n, global_first, values);
}

// The old values gathered by the scan (old_bits[k] at positions[k]), for when they are
// overwritten already (scan_and_copy_changes); the new ones from `new_bytes`, or, when
// new_bits is given, new_bits[k] (a capture, change_capture.h).
template <typename U>
uint64_t encode_scanned_values(const uint32_t* old_bits, const uint32_t* new_bits,
                               const uint8_t* new_bytes, const uint32_t* positions, uint32_t n,
                               uint64_t global_first, uint32_t* values) {
  const auto old_at = [&](uint32_t k) { return static_cast<U>(old_bits[k]); };
  if (new_bits != nullptr) {
    return encode_values_from<U>(
        old_at, [&](uint32_t k) { return static_cast<U>(new_bits[k]); }, positions, n, global_first,
        values);
  }
  return encode_values_from<U>(
      old_at, [&](uint32_t k) { return load<U>(new_bytes + size_t{positions[k]} * sizeof(U)); },
      positions, n, global_first, values);
}

// Adds the decoded differences into a contiguous destination whose element 0 has chunk
// position `first_pos` (positions outside [first_pos, first_pos + count) are skipped; a shard
// sees only its part). Returns the checksum change; `applied` counts written elements.
// Destination lines are prefetched a few changes ahead: after a large copy they are rarely in
// cache, and the misses would otherwise be taken one at a time.
template <typename U>
uint64_t apply_values(uint8_t* dest, const uint32_t* positions, const uint32_t* values, uint32_t n,
                      int64_t first_pos, uint64_t count, uint64_t chunk_global, uint64_t* applied) {
  constexpr unsigned w = sizeof(U) * 8;
  constexpr uint32_t kAhead = 16;
  uint64_t sum = 0, written = 0;
  for (uint32_t k = 0; k < n; ++k) {
    if (k + kAhead < n) {
      const int64_t ahead = int64_t{positions[k + kAhead]} - first_pos;
      if (ahead >= 0 && static_cast<uint64_t>(ahead) < count) {
        __builtin_prefetch(dest + ahead * static_cast<int64_t>(sizeof(U)), 1);
      }
    }
    const int64_t idx = int64_t{positions[k]} - first_pos;
    if (idx < 0 || static_cast<uint64_t>(idx) >= count) continue;
    uint8_t* p = dest + idx * static_cast<int64_t>(sizeof(U));
    const U o = load<U>(p);
    const U v = static_cast<U>(o + static_cast<U>(diff_from_value(values[k], w)));
    store<U>(p, v);
    sum += change_term<U>(chunk_global + positions[k], o, v);
    ++written;
  }
  *applied += written;
  return sum;
}

// apply_values for changes whose destination elements and global indices are given one by one
// (a box record's changes, run by run of the box): element at[k] (skipped outside
// [0, count)) takes values[k], weighed at global[k] in C().
template <typename U>
uint64_t apply_values_at(uint8_t* dest, const int64_t* at, const uint64_t* global,
                         const uint32_t* values, uint32_t n, uint64_t count, uint64_t* applied) {
  constexpr unsigned w = sizeof(U) * 8;
  constexpr uint32_t kAhead = 16;
  uint64_t sum = 0, written = 0;
  for (uint32_t k = 0; k < n; ++k) {
    if (k + kAhead < n && at[k + kAhead] >= 0 && static_cast<uint64_t>(at[k + kAhead]) < count) {
      __builtin_prefetch(dest + at[k + kAhead] * static_cast<int64_t>(sizeof(U)), 1);
    }
    if (at[k] < 0 || static_cast<uint64_t>(at[k]) >= count) continue;
    uint8_t* p = dest + at[k] * static_cast<int64_t>(sizeof(U));
    const U o = load<U>(p);
    const U v = static_cast<U>(o + static_cast<U>(diff_from_value(values[k], w)));
    store<U>(p, v);
    sum += change_term<U>(global[k], o, v);
    ++written;
  }
  *applied += written;
  return sum;
}

// Undoes apply_values_at.
template <typename U>
void revert_values_at(uint8_t* dest, const int64_t* at, const uint32_t* values, uint32_t n,
                      uint64_t count) {
  constexpr unsigned w = sizeof(U) * 8;
  for (uint32_t k = 0; k < n; ++k) {
    if (at[k] < 0 || static_cast<uint64_t>(at[k]) >= count) continue;
    uint8_t* p = dest + at[k] * static_cast<int64_t>(sizeof(U));
    store<U>(p, static_cast<U>(load<U>(p) - static_cast<U>(diff_from_value(values[k], w))));
  }
}

// Undoes apply_values.
template <typename U>
void revert_values(uint8_t* dest, const uint32_t* positions, const uint32_t* values, uint32_t n,
                   int64_t first_pos, uint64_t count) {
  constexpr unsigned w = sizeof(U) * 8;
  for (uint32_t k = 0; k < n; ++k) {
    const int64_t idx = int64_t{positions[k]} - first_pos;
    if (idx < 0 || static_cast<uint64_t>(idx) >= count) continue;
    uint8_t* p = dest + idx * static_cast<int64_t>(sizeof(U));
    store<U>(p, static_cast<U>(load<U>(p) - static_cast<U>(diff_from_value(values[k], w))));
  }
}

}  // namespace weightcast::kernels
