// Seed inputs for the GPU chunk decoder's differential fuzz target (chunk_hd_fuzz_target.cc):
// chunks of every mode and element size, each behind the two parameter bytes the target reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

// Input layout: u8 element size selector (0: 1 byte, 1: 2, else 4), u8 chunk length / 64
// (0 means 256 * 64), then the chunk's bytes.
constexpr size_t kChunkFuzzPrefixBytes = 2;

std::vector<std::vector<uint8_t>> make_chunk_hd_seeds();

}  // namespace weightcast::fuzzing
