#include "transport/tensor_staging.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codec/base/thread_pool.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include "transport/tensor_staging_cuda.h"
#endif

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

// The staging buffer of `ref` must hold exactly its elements.
Status check_buffer(const TensorRef& ref, size_t bytes, const char* what) {
  const uint64_t want = ref.numel() * ref.element_size();
  if (bytes != want) {
    return invalid_argument("tensor '" + ref.name + "': " + what + " buffer of " +
                            std::to_string(bytes) + " bytes for " + std::to_string(ref.numel()) +
                            " elements of " + std::to_string(ref.element_size()) + " bytes (" +
                            std::to_string(want) + " bytes)");
  }
  return ok_status();
}

void scatter_host(std::span<const uint8_t> in, const TensorRef& ref) {
  const size_t es = ref.element_size();
  uint8_t* base = ref.first_byte();
  for_each_run(ref, [&](int64_t offset, uint64_t flat, uint64_t count) {
    std::memcpy(base + offset * static_cast<int64_t>(es), in.data() + flat * es, count * es);
  });
}

// Calls fn(k) for k in [0, n) on `pool`, or on this thread without one.
void for_each_index(ThreadPool* pool, size_t n, const std::function<void(size_t)>& fn) {
  if (pool != nullptr && n > 1) {
    pool->parallel_for(n, fn);
    return;
  }
  for (size_t k = 0; k < n; ++k) fn(k);
}

}  // namespace

Status check_stageable(const TensorRef& ref) {
  RETURN_IF_ERROR(ref.validate());
  if (ref.memory == MemoryKind::kCuda && !WEIGHTCAST_HAVE_CUDA) {
    return invalid_argument("tensor '" + ref.name + "' is in the memory of CUDA device " +
                            std::to_string(ref.device) +
                            ", but weightcast was built without the CUDA toolkit "
                            "(WEIGHTCAST_HAVE_CUDA=0): stage it to host memory first, or "
                            "rebuild with -DWEIGHTCAST_WITH_CUDA=ON");
  }
  return ok_status();
}

void gather_host_view(const TensorRef& ref, const uint8_t* first, std::span<uint8_t> out) {
  const size_t es = ref.element_size();
  for_each_run(ref, [&](int64_t offset, uint64_t flat, uint64_t count) {
    std::memcpy(out.data() + flat * es, first + offset * static_cast<int64_t>(es), count * es);
  });
}

Status gather_tensor(const TensorRef& ref, std::span<uint8_t> out) {
  const std::span<uint8_t> outs[] = {out};
  return gather_tensors(std::span<const TensorRef>(&ref, 1), outs, nullptr);
}

Status gather_tensors(std::span<const TensorRef> refs, std::span<const std::span<uint8_t>> outs,
                      ThreadPool* pool) {
  if (refs.size() != outs.size()) {
    return invalid_argument("gather of " + std::to_string(refs.size()) + " tensors into " +
                            std::to_string(outs.size()) + " buffers");
  }
  std::vector<size_t> host, cuda;
  for (size_t i = 0; i < refs.size(); ++i) {
    RETURN_IF_ERROR(check_stageable(refs[i]));
    RETURN_IF_ERROR(check_buffer(refs[i], outs[i].size(), "gather"));
    (refs[i].memory == MemoryKind::kCuda ? cuda : host).push_back(i);
  }
  // Host views cannot fail once checked.
  const auto gather_host = [&] {
    for_each_index(pool, host.size(), [&](size_t k) {
      const TensorRef& ref = refs[host[k]];
      gather_host_view(ref, ref.first_byte(), outs[host[k]]);
    });
  };
  if (cuda.empty()) {
    gather_host();
    return ok_status();
  }
#if WEIGHTCAST_HAVE_CUDA
  return gather_cuda_tensors(refs, outs, cuda, pool, gather_host);
#else
  return internal_error("tensor '" + refs[cuda.front()].name +
                        "': CUDA view passed check_stageable in a build without CUDA");
#endif
}

Status scatter_tensor(std::span<const uint8_t> in, const TensorRef& ref) {
  RETURN_IF_ERROR(check_stageable(ref));
  RETURN_IF_ERROR(check_buffer(ref, in.size(), "scatter"));
  if (ref.memory != MemoryKind::kCuda) {
    scatter_host(in, ref);
    return ok_status();
  }
#if WEIGHTCAST_HAVE_CUDA
  return scatter_cuda_tensor(in, ref);
#else
  return internal_error("tensor '" + ref.name +
                        "': CUDA view passed check_stageable in a build without CUDA");
#endif
}

}  // namespace weightcast
