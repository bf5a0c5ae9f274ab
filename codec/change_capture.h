// The hooked write's capture: the compare fused with the copy, keeping only what the chunk's
// encoding needs later, so that the write itself costs little beyond the copy and the encoding
// runs elsewhere (DeltaRecorder with a DeferredEncoder, deferred_encoder.h).
//
// A capture of a run of n elements is, per 64-byte block b of the run (64 / elem_size lanes;
// the last block may be partial), a lane mask of its changed elements (bit i for element
// b * (64 / elem_size) + i; two 32-bit words for 1-byte elements, one otherwise), and the old
// values of the changed elements, packed in ascending order (the spill). With AVX-512 VBMI2 a
// block costs its compare, the store of the new values, a compress of the old ones and two
// stores into a few cache lines, with no branch that depends on the data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weightcast {

// Blocks of a run of n elements: ceil(n * elem_size / 64).
constexpr uint32_t capture_blocks(uint32_t n, size_t elem_size) {
  const auto lanes = static_cast<uint32_t>(64 / elem_size);
  return (n + lanes - 1) / lanes;
}
// 32-bit mask words of a capture of n elements.
constexpr size_t capture_mask_words(uint32_t n, size_t elem_size) {
  return size_t{capture_blocks(n, elem_size)} * (elem_size == 1 ? 2 : 1);
}
// Where the spill starts in a capture buffer (64-byte aligned from the buffer's start).
constexpr size_t capture_spill_offset(uint32_t n, size_t elem_size) {
  return (capture_mask_words(n, elem_size) * 4 + 63) / 64 * 64;
}
// Bytes a capture buffer of n elements needs: masks, then the spill with room for every
// element plus 64 bytes the vector kernels may write past the packed values.
constexpr size_t capture_bytes(uint32_t n, size_t elem_size) {
  return capture_spill_offset(n, elem_size) + size_t{n} * elem_size + 64;
}

// Writes `new_bytes` over `live` (n elements of `elem_size` bytes: 1, 2 or 4) and captures the
// change into `capture` (capture_bytes(n) bytes, 4-byte aligned). Returns how many elements
// changed. `live`, `new_bytes` and `capture` must not overlap.
uint32_t capture_and_copy_changes(uint8_t* live, const uint8_t* new_bytes, uint32_t n,
                                  size_t elem_size, uint8_t* capture);

// The changed positions of a capture of `n` elements in ascending order, with each one's old
// bits (zero-extended), as scan_and_copy_changes gives them (change_scan.h); returns their
// number. `positions` and `old_bits` need room for n entries.
uint32_t expand_capture(const uint8_t* capture, uint32_t n, size_t elem_size, uint32_t* positions,
                        uint32_t* old_bits);

}  // namespace weightcast
