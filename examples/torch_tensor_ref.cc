#include "examples/torch_tensor_ref.h"

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <utility>

namespace weightcast::examples {
namespace {

using api::DType;
using api::MemoryKind;
using api::TensorRef;

api::Status invalid_argument(std::string message) {
  return api::Status(api::StatusCode::kInvalidArgument, std::move(message));
}

std::optional<DType> dtype_from_torch(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Bool:
      return DType::kBool;
    case c10::ScalarType::Byte:
      return DType::kU8;
    case c10::ScalarType::Char:
      return DType::kI8;
    case c10::ScalarType::Short:
      return DType::kI16;
    case c10::ScalarType::Int:
      return DType::kI32;
    case c10::ScalarType::Long:
      return DType::kI64;
    case c10::ScalarType::Half:
      return DType::kF16;
    case c10::ScalarType::BFloat16:
      return DType::kBF16;
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Double:
      return DType::kF64;
    default:
      return std::nullopt;
  }
}

}  // namespace

api::Result<TensorRef> tensor_ref_from_torch(const std::string& name, const at::Tensor& t) {
  const std::string what = "tensor '" + name + "'";
  if (!t.defined()) return invalid_argument(what + " is an undefined at::Tensor");
  const auto dtype = dtype_from_torch(t.scalar_type());
  if (!dtype) {
    return invalid_argument(what + ": dtype " + std::string(c10::toString(t.scalar_type())) +
                            " has no weightcast dtype (bool, u8, i8, i16, i32, i64, f16, bf16, "
                            "f32, f64)");
  }
  if (t.layout() != c10::kStrided || !t.has_storage()) {
    return invalid_argument(what + ": only strided tensors with a storage can be registered");
  }
  TensorRef ref;
  ref.name = name;
  ref.dtype = *dtype;
  ref.shape.assign(t.sizes().begin(), t.sizes().end());
  ref.strides.assign(t.strides().begin(), t.strides().end());
  ref.offset = t.storage_offset();
  // The storage's base, not data_ptr(): a slice or a narrow()ed view of a packed parameter
  // keeps its position in the allocation through `offset`. The endpoint writes through it
  // (Subscriber), hence the const_cast (libtorch >= 2.1 returns const void* here).
  ref.data = const_cast<void*>(static_cast<const void*>(t.storage().data()));
  if (ref.data == nullptr) {
    return invalid_argument(what + ": its storage has no memory (empty or not allocated)");
  }
  const c10::Device device = t.device();
  if (device.is_cpu()) {
    ref.memory = MemoryKind::kHost;
    ref.device = -1;
  } else if (device.is_cuda()) {
    ref.memory = MemoryKind::kCuda;
    ref.device = device.index();
  } else {
    return invalid_argument(what + ": device " + device.str() + " is neither CPU nor CUDA memory");
  }
  return ref;
}

}  // namespace weightcast::examples
