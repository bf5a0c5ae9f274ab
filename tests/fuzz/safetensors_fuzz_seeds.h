// Valid safetensors files for the safetensors fuzz target: every dtype, scalars, zero-size
// tensors, metadata, escaped names, and reference-style headers our writer would not produce
// (header order differs from data order, unknown fields, whitespace, no padding).
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_safetensors_seeds();

}  // namespace weightcast::fuzzing
