// TensorRef: a non-owning view of a tensor's elements in some memory.
//
// A packed parameter's slices are TensorRefs with strides into the same allocation, so a
// view need not be contiguous. Strides and offsets are in elements, shapes are row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"

namespace weightcast {

enum class MemoryKind : uint8_t { kHost, kHostPinned, kCuda };

struct TensorRef {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // elements; empty means contiguous row-major
  int64_t offset = 0;            // elements from `data` to the first element
  void* data = nullptr;          // base of the allocation
  MemoryKind memory = MemoryKind::kHost;
  int device = -1;  // CUDA ordinal when memory == kCuda

  // A contiguous host view of `count` elements at `data`.
  static TensorRef contiguous(std::string name, DType dtype, void* data, int64_t count);

  uint64_t numel() const;
  size_t element_size() const { return dtype_size(dtype); }
  // Strides actually in effect (the row-major ones when `strides` is empty).
  std::vector<int64_t> effective_strides() const;
  bool is_contiguous() const;
  // Rows [first, first + count) of dimension 0, as a view of the same memory (explicit
  // strides); a 0-D view is returned as it is.
  TensorRef rows(int64_t first, int64_t count) const;
  // Pointer to the first element.
  uint8_t* first_byte() const {
    return static_cast<uint8_t*>(data) + offset * static_cast<int64_t>(element_size());
  }
  // Checks rank agreement, non-negative sizes and non-null data; errors name the tensor.
  Status validate() const;
};

// Maps flat row-major indices of a view to element offsets from its first element.
// Contiguous views take the fast path; others unravel the index over the shape.
class ElementAddresser {
 public:
  explicit ElementAddresser(const TensorRef& ref);
  int64_t offset_of(uint64_t flat) const {
    if (contiguous_) return static_cast<int64_t>(flat);
    return strided_offset(flat);
  }
  bool contiguous() const { return contiguous_; }

 private:
  int64_t strided_offset(uint64_t flat) const;
  bool contiguous_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
};

}  // namespace weightcast
