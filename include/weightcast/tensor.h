// TensorRef: a non-owning view of a tensor's elements in the caller's memory, which a
// Publisher reads and a Subscriber writes in place.
//
// A view need not be contiguous: a slice of a packed parameter (gate_proj inside
// gate_up_proj, q inside qkv) is a TensorRef with strides into the same allocation. Shapes are
// row-major; strides and offset are in elements. The memory must stay valid, at the same
// address, for as long as the tensor is registered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weightcast::api {

// Element types; the values are those of weightcast's wire formats.
enum class DType : uint8_t {
  kBool = 1,
  kU8 = 2,
  kI8 = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kF16 = 7,
  kBF16 = 8,
  kF32 = 9,
  kF64 = 10,
  kF8E4M3FN = 11,
  kF8E5M2 = 12,
};

// Bytes per element (0 for a value outside the enum).
size_t dtype_size(DType dtype);

enum class MemoryKind : uint8_t {
  kHost,
  kHostPinned,
  kCuda,  // in builds with the CUDA toolkit; `device` is the CUDA ordinal
};

struct TensorRef {
  std::string name;  // unique among the tensors registered with one endpoint
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // elements; empty means contiguous row-major
  int64_t offset = 0;            // elements from `data` to the first element
  void* data = nullptr;          // base of the allocation
  MemoryKind memory = MemoryKind::kHost;
  int device = -1;

  // A contiguous one-dimensional host view of `count` elements at `data`.
  static TensorRef contiguous(std::string name, DType dtype, void* data, int64_t count) {
    TensorRef t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = {count};
    t.data = data;
    return t;
  }

  uint64_t numel() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= d < 0 ? 0 : static_cast<uint64_t>(d);
    return n;
  }
};

}  // namespace weightcast::api
