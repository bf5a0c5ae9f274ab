// Copies between a TensorRef (whole, shard, or strided view of a packed parameter, in host
// memory) and a contiguous row-major staging buffer of its elements. The endpoints stage
// every tensor: the publisher reads the trainer's weights once into its buffer (after which
// the trainer may change them again), the subscriber writes the engine's weights only from a
// staging copy whose checksums were verified.
#pragma once

#include <cstdint>
#include <span>

#include "codec/status.h"
#include "codec/tensor_ref.h"

namespace weightcast {

// Refuses views the endpoints cannot stage (null data, bad rank, device memory); the error
// names the tensor.
Status check_stageable(const TensorRef& ref);

// `out` must be ref.numel() * element size bytes.
void gather_tensor(const TensorRef& ref, std::span<uint8_t> out);
void scatter_tensor(std::span<const uint8_t> in, const TensorRef& ref);

}  // namespace weightcast
