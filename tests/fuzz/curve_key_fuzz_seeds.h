// Valid CURVE key files (src/control/curve_keys.h) for the key file fuzz target: with and
// without comments, CRLF line ends, surrounding blanks.
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_curve_key_seeds();

}  // namespace weightcast::fuzzing
