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

}  // namespace weightcast
