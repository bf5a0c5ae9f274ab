#include "codec/tensor_ref.h"

namespace weightcast {

TensorRef TensorRef::contiguous(std::string name, DType dtype, void* data, int64_t count) {
  TensorRef ref;
  ref.name = std::move(name);
  ref.dtype = dtype;
  ref.shape = {count};
  ref.data = data;
  return ref;
}

uint64_t TensorRef::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d < 0 ? 0 : d);
  return n;
}

TensorRef TensorRef::rows(int64_t first, int64_t count) const {
  TensorRef sub = *this;
  if (shape.empty()) return sub;
  sub.strides = effective_strides();
  sub.offset = offset + first * sub.strides[0];
  sub.shape[0] = count;
  return sub;
}

std::vector<int64_t> TensorRef::effective_strides() const {
  if (!strides.empty()) return strides;
  std::vector<int64_t> s(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = step;
    step *= shape[d];
  }
  return s;
}

bool TensorRef::is_contiguous() const {
  if (strides.empty()) return true;
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != step) return false;
    step *= shape[d];
  }
  return true;
}

Status TensorRef::validate() const {
  const std::string who = "tensor '" + name + "'";
  if (!strides.empty() && strides.size() != shape.size()) {
    return invalid_argument(who + ": " + std::to_string(strides.size()) + " strides for rank " +
                            std::to_string(shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return invalid_argument(who + ": negative size " + std::to_string(shape[d]) + " in dim " +
                              std::to_string(d));
    }
  }
  if (offset < 0) return invalid_argument(who + ": negative offset " + std::to_string(offset));
  if (data == nullptr && numel() > 0) return invalid_argument(who + ": null data pointer");
  return ok_status();
}

ElementAddresser::ElementAddresser(const TensorRef& ref)
    : contiguous_(ref.is_contiguous()), shape_(ref.shape), strides_(ref.effective_strides()) {}

int64_t ElementAddresser::strided_offset(uint64_t flat) const {
  int64_t off = 0;
  for (size_t d = shape_.size(); d-- > 0;) {
    const auto extent = static_cast<uint64_t>(shape_[d]);
    off += static_cast<int64_t>(flat % extent) * strides_[d];
    flat /= extent;
  }
  return off;
}

}  // namespace weightcast
