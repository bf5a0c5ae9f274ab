// Copies between a TensorRef (whole, shard, or strided view of a packed parameter, in host or
// CUDA device memory) and a contiguous row-major staging buffer of its elements in host
// memory. The publisher reads the trainer's weights once into its buffer (after which the
// trainer may change them again); the journal reader (transport/fs/catch_up_reader.h) writes
// anchor tensors that it cannot pread in place (strided or CUDA views) from a verified
// staging copy of a bounded size.
//
// CUDA tensors (memory == MemoryKind::kCuda, `device` = ordinal) are staged only in builds
// with the CUDA toolkit (WEIGHTCAST_HAVE_CUDA); the copies then go through pinned host
// staging (transport/tensor_staging_cuda.h) and need a usable GPU to run. Every call
// returns before it does and leaves the calling thread's current CUDA device as it found it.
#pragma once

#include <cstdint>
#include <span>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"

namespace weightcast {

class ThreadPool;

// Refuses views the endpoints cannot stage (null data, bad rank, negative sizes or offset,
// CUDA memory in a build without the CUDA toolkit); the error names the tensor.
Status check_stageable(const TensorRef& ref);

// Copies the view's elements, row-major, into `out`, which must be exactly ref.numel() *
// element size bytes. Errors (kInvalidArgument for an unstageable view or a wrong `out`
// size, kIoError and others for failed CUDA calls) name the tensor; `out` is then undefined.
[[nodiscard]] Status gather_tensor(const TensorRef& ref, std::span<uint8_t> out);

// gather_tensor for every refs[i] into outs[i]. Host views are copied on `pool` (nullptr: on
// the calling thread) while the CUDA views' device-to-host copies are in flight; the CUDA
// views of one device are planned together (codec/copy_planner.h), so slices of one packed
// allocation given consecutively and in order, covering it, move as one transfer. Every
// view is checked before anything is copied; the first error in tensor order is returned.
[[nodiscard]] Status gather_tensors(std::span<const TensorRef> refs,
                                    std::span<const std::span<uint8_t>> outs,
                                    ThreadPool* pool = nullptr);

// Writes `in` (ref.numel() * element size bytes, row-major) into the view's elements and no
// others; returns once they are written (for a CUDA view: the copies completed on the
// device). On error (naming the tensor) the view may be partly written.
[[nodiscard]] Status scatter_tensor(std::span<const uint8_t> in, const TensorRef& ref);

// Host primitive: copies the view's elements, row-major, into `out`, reading them from
// `first`, the address of the view's first element in a host copy of its memory laid out as
// the view's allocation is (the view itself, or pinned staging of a device extent). No checks.
void gather_host_view(const TensorRef& ref, const uint8_t* first, std::span<uint8_t> out);

}  // namespace weightcast
