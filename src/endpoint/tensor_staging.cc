#include "src/endpoint/tensor_staging.h"

#include <cstring>

namespace weightcast {
namespace {

// Calls copy(element offset of a run's first element from first_byte, flat index, elements)
// for every run of elements contiguous in the view: the whole tensor, rows when the last
// dimension has stride 1, single elements otherwise.
template <typename Copy>
void for_each_run(const TensorRef& ref, Copy&& copy) {
  const uint64_t n = ref.numel();
  if (n == 0) return;
  const ElementAddresser addr(ref);
  if (addr.contiguous()) {
    copy(0, 0, n);
    return;
  }
  const auto strides = ref.effective_strides();
  const uint64_t row = ref.shape.empty() ? 1 : static_cast<uint64_t>(ref.shape.back());
  const bool rows = !ref.shape.empty() && strides.back() == 1 && row > 0;
  const uint64_t run = rows ? row : 1;
  for (uint64_t flat = 0; flat < n; flat += run) copy(addr.offset_of(flat), flat, run);
}

}  // namespace

Status check_stageable(const TensorRef& ref) {
  RETURN_IF_ERROR(ref.validate());
  if (ref.memory == MemoryKind::kCuda) {
    return invalid_argument("tensor '" + ref.name +
                            "' is in CUDA memory; the endpoints stage host memory only until "
                            "the CUDA codec lands (stage it to host first)");
  }
  return ok_status();
}

void gather_tensor(const TensorRef& ref, std::span<uint8_t> out) {
  const size_t es = ref.element_size();
  const uint8_t* base = ref.first_byte();
  for_each_run(ref, [&](int64_t offset, uint64_t flat, uint64_t count) {
    std::memcpy(out.data() + flat * es, base + offset * static_cast<int64_t>(es), count * es);
  });
}

void scatter_tensor(std::span<const uint8_t> in, const TensorRef& ref) {
  const size_t es = ref.element_size();
  uint8_t* base = ref.first_byte();
  for_each_run(ref, [&](int64_t offset, uint64_t flat, uint64_t count) {
    std::memcpy(base + offset * static_cast<int64_t>(es), in.data() + flat * es, count * es);
  });
}

}  // namespace weightcast
