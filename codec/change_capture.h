// The hooked write's capture: the compare fused with the copy, keeping only what the chunk's
// encoding needs later, so that the write itself costs little beyond the copy and the encoding
// runs elsewhere (DeltaRecorder with a DeferredEncoder, deferred_encoder.h).
//
// A capture of a run of n elements holds, in ascending order, each changed element's position,
// its old value and its new value, packed in three arrays, so that the encoding reads the
// capture alone: neither the live tensor (whose lines have left the writer's cache by then, a
// miss per change) nor a mask per block (a walk over every block, changed or not). Positions
// are 16 bits within windows of kCaptureWindow elements; a header gives how many changes come
// before each window and the total. With AVX-512 VBMI2 a 64-byte block costs its compare, the
// store of the new values, three compresses in registers and three 16-byte stores (64-byte
// ones in the rare dense block), with no branch that depends on the data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weightcast {

inline constexpr uint32_t kCaptureWindow = 1u << 16;

constexpr uint32_t capture_windows(uint32_t n) {
  return (n + kCaptureWindow - 1) / kCaptureWindow;
}
// The header is (windows + 1) 32-bit counts; the positions follow, 64-byte aligned, with room
// for n + 32 of them (the vector kernels store 64 bytes past the last position).
constexpr size_t capture_positions_offset(uint32_t n) {
  return (size_t{capture_windows(n) + 1} * 4 + 63) / 64 * 64;
}
// Each value spill has room for every element plus 64 bytes written past the packed values.
constexpr size_t capture_spill_offset(uint32_t n, size_t /*elem_size*/) {
  return capture_positions_offset(n) + (size_t{n} * 2 + 64 + 63) / 64 * 64;
}
constexpr size_t capture_new_spill_offset(uint32_t n, size_t elem_size) {
  return capture_spill_offset(n, elem_size) + size_t{n} * elem_size + 64;
}
// Bytes a capture buffer of n elements needs: the header, the positions, the two spills.
constexpr size_t capture_bytes(uint32_t n, size_t elem_size) {
  return capture_new_spill_offset(n, elem_size) + size_t{n} * elem_size + 64;
}

// Writes `new_bytes` over `live` (n elements of `elem_size` bytes: 1, 2 or 4) and captures the
// change into `capture` (capture_bytes(n) bytes, 4-byte aligned). Returns how many elements
// changed. `live`, `new_bytes` and `capture` must not overlap.
uint32_t capture_and_copy_changes(uint8_t* live, const uint8_t* new_bytes, uint32_t n,
                                  size_t elem_size, uint8_t* capture);

// The changed positions of a capture of `n` elements in ascending order, with each one's old
// and new bits (zero-extended), the first two as scan_and_copy_changes gives them
// (change_scan.h); returns their number. The outputs need room for n entries each.
uint32_t expand_capture(const uint8_t* capture, uint32_t n, size_t elem_size, uint32_t* positions,
                        uint32_t* old_bits, uint32_t* new_bits);

}  // namespace weightcast
