// The hooked write's capture: the compare fused with the copy, keeping only what the chunk's
// encoding needs later, so that the write itself costs little beyond the copy and the encoding
// runs elsewhere (DeltaRecorder with a DeferredEncoder, deferred_encoder.h).
//
// A capture of a run of n elements holds, in ascending order, one entry per changed element:
// its position, its old value and its new value packed in one word (8 bytes for 1- and 2-byte
// elements, 16 for 4-byte ones), so that the encoding reads the capture alone: neither the
// live tensor (whose lines have left the writer's cache by then, a miss per change) nor a mask
// per block (a walk over every block, changed or not). One store an entry: three separate
// arrays cost the write 1.25 x as much (docs/PERFORMANCE.md, "Hooked write"). Positions are
// 16 bits within windows of kCaptureWindow elements; a header gives how many changes come
// before each window and the total.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weightcast {

inline constexpr uint32_t kCaptureWindow = 1u << 16;

constexpr uint32_t capture_windows(uint32_t n) {
  return (n + kCaptureWindow - 1) / kCaptureWindow;
}
constexpr size_t capture_entry_bytes(size_t elem_size) {
  return elem_size <= 2 ? 8 : 16;
}
// The header is (windows + 1) 32-bit counts; the entries follow, 64-byte aligned, with room
// for n + 1 of them (the kernels write one entry past the last change).
constexpr size_t capture_entries_offset(uint32_t n) {
  return (size_t{capture_windows(n) + 1} * 4 + 63) / 64 * 64;
}
// Bytes a capture buffer of n elements needs: the header and the entries.
constexpr size_t capture_bytes(uint32_t n, size_t elem_size) {
  return capture_entries_offset(n) + (size_t{n} + 1) * capture_entry_bytes(elem_size);
}

// Writes `new_bytes` over `live` (n elements of `elem_size` bytes: 1, 2 or 4) and captures the
// change into `capture` (capture_bytes(n) bytes, 8-byte aligned). Returns how many elements
// changed. `live`, `new_bytes` and `capture` must not overlap.
uint32_t capture_and_copy_changes(uint8_t* live, const uint8_t* new_bytes, uint32_t n,
                                  size_t elem_size, uint8_t* capture);

// The changed positions of a capture of `n` elements in ascending order, with each one's old
// and new bits (zero-extended), the first two as scan_and_copy_changes gives them
// (change_scan.h); returns their number. The outputs need room for n entries each.
uint32_t expand_capture(const uint8_t* capture, uint32_t n, size_t elem_size, uint32_t* positions,
                        uint32_t* old_bits, uint32_t* new_bits);

}  // namespace weightcast
