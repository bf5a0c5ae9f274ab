#include "codec/tensor_bytes.h"

namespace weightcast {

Result<uint64_t> shape_numel(const std::vector<int64_t>& shape, const std::string& what) {
  uint64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return data_loss(what + ": negative size " + std::to_string(shape[d]) + " in dim " +
                       std::to_string(d));
    }
    const auto extent = static_cast<uint64_t>(shape[d]);
    if (extent != 0 && n > (uint64_t{1} << 62) / extent) {
      return data_loss(what + ": shape has more than 2^62 elements");
    }
    n *= extent;
  }
  return n;
}

}  // namespace weightcast
