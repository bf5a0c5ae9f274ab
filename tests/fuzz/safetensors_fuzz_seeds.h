// Valid safetensors files for the safetensors fuzz target: every dtype, scalars, zero-size
// tensors, metadata, escaped names, and reference-style headers our writer would not produce
// (header order differs from data order, unknown fields, whitespace, no padding).
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_safetensors_seeds();

// What the safetensors fuzz target saw, so a driver can check that inputs reach both outcomes.
struct SafetensorsFuzzCounts {
  uint64_t parsed = 0;        // inputs that parsed (and then round-tripped; else it aborts)
  uint64_t rejected = 0;      // inputs refused with a message
  uint64_t tensors_seen = 0;  // tensors in the inputs that parsed
};
extern SafetensorsFuzzCounts safetensors_fuzz_counts;

}  // namespace weightcast::fuzzing
