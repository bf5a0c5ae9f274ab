// Host tensors as the file formats see them: a name, a dtype, a row-major shape and contiguous
// little-endian bytes. The formats (safetensors, the torch.save zip) read and write these.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/byte_sink.h"
#include "codec/base/status.h"
#include "codec/dtype.h"

namespace weightcast {

// A view: `bytes` belongs to someone else (a mapped file, a caller's buffer).
struct TensorBytesView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;  // numel * dtype_size bytes, row-major
};

// Elements of a shape; fails (naming `what`) on a negative dimension or a product that
// overflows 2^62.
Result<uint64_t> shape_numel(const std::vector<int64_t>& shape, const std::string& what);

}  // namespace weightcast
