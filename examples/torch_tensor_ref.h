// The libtorch adapter of the public API (<weightcast/tensor.h>): a TensorRef describing an
// at::Tensor's memory, so a trainer or an engine registers its torch tensors (whole
// parameters, slices, strided views of a packed parameter) with a Publisher or a Subscriber
// without copying them.
//
// Contract: the TensorRef aliases the tensor's storage (data = the storage's base pointer,
// offset = storage_offset, strides in elements), so it stays valid only while the storage
// lives and is not reallocated (no resize_, no set_ on the registered tensors). Errors name
// the tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include <weightcast/status.h>
#include <weightcast/tensor.h>

namespace weightcast::examples {

// bool, u8, i8, i16, i32, i64, f16, bf16, f32, f64 map to weightcast's DType; any other
// dtype, a non-strided layout (sparse, mkldnn), a tensor without storage or a device other
// than CPU (kHost) and CUDA (kCuda, with the device index) is an error naming the tensor.
api::Result<api::TensorRef> tensor_ref_from_torch(const std::string& name, const at::Tensor& t);

}  // namespace weightcast::examples
