// The CUDA half of tensor staging (transport/tensor_staging.h), defined only in builds
// with the CUDA toolkit (WEIGHTCAST_HAVE_CUDA; tensor_staging_cuda.cc). Callers go through
// gather_tensor(s)/scatter_tensor, which check every view (check_stageable, buffer sizes)
// before calling here; these functions assume that was done.
//
// Device to host: each view is staged as its covering extent (see gather_cuda_tensors) with
// the CUDA copy executor (transport/copy_executor_cuda.h: pinned staging, a stream, an event
// per transfer), then its elements are gathered from the pinned copy on the host. Host to
// device: the bytes go into pinned staging and from there into the view's elements only,
// with one cudaMemcpyAsync/cudaMemcpy2DAsync per block of rows or elements on a stream, and
// an event waited on. Both restore the calling thread's current device; errors name the
// tensor, the CUDA call and cudaGetErrorString's text.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"

namespace weightcast {

class ThreadPool;

// Gathers refs[i] into outs[i] for every i in `indices` (all kCuda views). Enqueues every
// device-to-host copy, calls `overlap` once (host work to run while they are in flight; may
// be empty), then waits for the copies and unpacks the pinned staging on `pool` (nullptr: on
// the calling thread). `overlap` is called only when the copies were enqueued.
[[nodiscard]] Status gather_cuda_tensors(std::span<const TensorRef> refs,
                                         std::span<const std::span<uint8_t>> outs,
                                         std::span<const size_t> indices, ThreadPool* pool,
                                         const std::function<void()>& overlap);

// Writes `in` into the elements of `ref` (a kCuda view) and waits for the copies.
[[nodiscard]] Status scatter_cuda_tensor(std::span<const uint8_t> in, const TensorRef& ref);

}  // namespace weightcast
