// Finding the elements whose raw bits differ between two versions: the one full pass the
// encoder makes over both buffers, so it runs at memory speed (AVX2 where the CPU has it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace weightcast {

// Writes the indices k in [0, n) with old[k] != new[k] (raw bits, elements of `elem_size`
// bytes: 1, 2 or 4) to `positions` in ascending order and returns how many there are.
// `positions` must have room for n entries.
uint32_t scan_changes(const uint8_t* old_bytes, const uint8_t* new_bytes, uint32_t n,
                      size_t elem_size, uint32_t* positions);

// The same scan fused with the copy that follows it in hooked writes: writes `new_bytes` over
// `live` (n elements) and returns the positions that changed, as scan_changes does, with each
// one's old bits (zero-extended) in `old_bits`, so that the chunk can be encoded after its old
// values are gone (encode_scanned_chunk, delta_chunk.h). One pass over both buffers: the
// compare costs little beyond the copy. `positions` and `old_bits` need room for n entries;
// `live` and `new_bytes` must not overlap.
uint32_t scan_and_copy_changes(uint8_t* live, const uint8_t* new_bytes, uint32_t n,
                               size_t elem_size, uint32_t* positions, uint32_t* old_bits);

}  // namespace weightcast
