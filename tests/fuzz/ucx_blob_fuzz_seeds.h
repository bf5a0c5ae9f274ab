// Valid UCX version blobs (transport/ucx/ucx_version_blob.h) for the blob fuzz target: no
// parts, empty parts, several parts with rkeys of different sizes.
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_ucx_blob_seeds();

}  // namespace weightcast::fuzzing
