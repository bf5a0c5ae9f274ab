#include "codec/slice_checksum.h"

#include <cstring>

#include "codec/checksum.h"

namespace weightcast {
namespace {

// C() over `count` elements of `view` from local index `local`, the first at global index
// `global`.
uint64_t run_checksum(const TensorRef& view, const ElementAddresser& at, uint64_t local,
                      uint64_t count, uint64_t global) {
  const size_t es = view.element_size();
  if (at.contiguous()) {
    return checksum_range(view.first_byte() + local * es, es, count, global);
  }
  uint64_t sum = 0;
  for (uint64_t k = 0; k < count; ++k) {
    uint64_t bits = 0;
    std::memcpy(&bits, view.first_byte() + at.offset_of(local + k) * static_cast<int64_t>(es), es);
    sum += (global + k + 1) * checksum_mix(bits, es);
  }
  return sum;
}

Status check_view(const TensorRef& view, const std::vector<int64_t>& shape,
                  const TensorSlice& slice) {
  RETURN_IF_ERROR(view.validate());
  RETURN_IF_ERROR(check_slice(view.name, shape, slice));
  if (view.memory == MemoryKind::kCuda) {
    return invalid_argument("tensor '" + view.name +
                            "': checksums of slices are taken in host memory, not CUDA memory");
  }
  if (view.numel() != slice_elements(shape, slice)) {
    return invalid_argument("tensor '" + view.name + "': the view has " +
                            std::to_string(view.numel()) + " elements but slice " +
                            describe_slice(slice) + " holds " +
                            std::to_string(slice_elements(shape, slice)));
  }
  return ok_status();
}

}  // namespace

Result<uint64_t> slice_checksum(const TensorRef& view, const SliceDestination& where, uint64_t lo,
                                uint64_t hi) {
  RETURN_IF_ERROR(check_view(view, where.shape, where.slice));
  const ElementAddresser at(view);
  uint64_t sum = 0;
  for_each_slice_run(where.shape, where.slice, lo, hi, [&](const SliceRun& r) {
    sum += run_checksum(view, at, r.local, r.count, r.global);
    return true;
  });
  return sum;
}

Result<std::vector<uint64_t>> partial_checksums(const TensorRef& own_view,
                                                const std::vector<int64_t>& shape,
                                                const TensorSlice& own,
                                                const std::vector<TensorSlice>& layout) {
  RETURN_IF_ERROR(check_view(own_view, shape, own));
  const ElementAddresser at(own_view);
  std::vector<uint64_t> sums(layout.size(), 0);
  for (size_t k = 0; k < layout.size(); ++k) {
    RETURN_IF_ERROR(check_slice(own_view.name, shape, layout[k]));
    for_each_shared_run(shape, own, layout[k], [&](const SharedRun& r) {
      sums[k] += run_checksum(own_view, at, r.local_a, r.count, r.global);
      return true;
    });
  }
  return sums;
}

}  // namespace weightcast
