// Valid compressed parts (codec/part_compression.h) for the part compression fuzz target:
// every plane width, empty and one-byte parts, tails, multi-block frames, both levels, and a
// part of real delta records; each as our writer makes it (with the zstd content checksum)
// and without the checksum, so that mutations of the compressed blocks reach the decoder.
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

// The limit the fuzz target decompresses under; every seed's raw_bytes is within it.
constexpr uint64_t kPartFuzzMaxRawBytes = uint64_t{1} << 20;

std::vector<std::vector<uint8_t>> make_part_compression_seeds();

}  // namespace weightcast::fuzzing
