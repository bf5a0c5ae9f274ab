// Valid delta records covering every chunk mode and element width: fuzzing starts here.
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_delta_seeds();

}  // namespace weightcast::fuzzing
