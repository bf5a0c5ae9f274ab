// Valid delta records covering every chunk mode and element width: fuzzing starts here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_delta_seeds();

// The destination bytes the fuzz target applies into; seeds are encoded against them, so an
// unmutated seed applies and verifies.
inline uint8_t fuzz_base_byte(size_t i) {
  return static_cast<uint8_t>(i * 131 + 7);
}

}  // namespace weightcast::fuzzing
