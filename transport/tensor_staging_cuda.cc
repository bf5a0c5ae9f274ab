// Built only with the CUDA toolkit (src/CMakeLists.txt). Plain C++ on the CUDA runtime API.
#include "transport/tensor_staging_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/copy_planner.h"
#include "transport/copy_executor_cuda.h"
#include "transport/tensor_staging.h"

namespace weightcast {
namespace {

// How long a gather waits for its device-to-host copies: a large model's weights take
// seconds over PCIe; a GPU that needs minutes is stuck, and the publish fails naming it.
constexpr std::chrono::minutes kCopyDeadline{5};

// "tensor 'w' (CUDA device 0): cudaSetDevice(9): cudaErrorInvalidDevice (invalid device
// ordinal)". Bad ordinals and values are the caller's; anything else is an I/O failure.
Status cuda_error(const TensorRef& ref, const std::string& call, cudaError_t e) {
  std::string m = "tensor '" + ref.name + "' (CUDA device " + std::to_string(ref.device) +
                  "): " + call + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  const bool caller = e == cudaErrorInvalidDevice || e == cudaErrorInvalidValue;
  return caller ? invalid_argument(std::move(m)) : io_error(std::move(m));
}

// Makes a device current for the scope; the destructor restores the thread's previous one
// (the copy executor sets devices without restoring them).
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    int now = -1;
    if (saved_ && (cudaGetDevice(&now) != cudaSuccess || now != previous_)) {
      (void)cudaSetDevice(previous_);
    }
  }
  // Errors name `who`.
  Status set(int device, const TensorRef& who) {
    if (!saved_) {
      if (cudaError_t e = cudaGetDevice(&previous_); e != cudaSuccess) {
        return cuda_error(who, "cudaGetDevice", e);
      }
      saved_ = true;
    }
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return cuda_error(who, "cudaSetDevice(" + std::to_string(device) + ")", e);
    }
    return ok_status();
  }

 private:
  bool saved_ = false;
  int previous_ = 0;
};

// A kCuda view must point into memory of its own device (a host pointer would be copied
// silently through unified addressing, another device's memory misattributed).
Status check_device_pointer(const TensorRef& ref) {
  cudaPointerAttributes attr{};
  if (cudaError_t e = cudaPointerGetAttributes(&attr, ref.data); e != cudaSuccess) {
    return cuda_error(ref, "cudaPointerGetAttributes", e);
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return invalid_argument("tensor '" + ref.name + "' is marked as memory of CUDA device " +
                            std::to_string(ref.device) +
                            " but its data pointer is not device memory (cudaMemoryType " +
                            std::to_string(static_cast<int>(attr.type)) + ")");
  }
  if (attr.device != ref.device) {
    return invalid_argument("tensor '" + ref.name + "' is marked as memory of CUDA device " +
                            std::to_string(ref.device) + " but its data lives on device " +
                            std::to_string(attr.device));
  }
  return ok_status();
}

// Elements [lo, hi) from `data` that hold every element of a non-empty view.
struct Extent {
  int64_t lo = 0, hi = 0;
};
Result<Extent> covering_extent(const TensorRef& ref) {
  Extent x{ref.offset, ref.offset + 1};
  const std::vector<int64_t> strides = ref.effective_strides();
  for (size_t d = 0; d < ref.shape.size(); ++d) {
    const int64_t reach = (ref.shape[d] - 1) * strides[d];
    (reach < 0 ? x.lo : x.hi) += reach;
  }
  if (x.lo < 0) {
    return invalid_argument("tensor '" + ref.name + "': its negative strides reach " +
                            std::to_string(-x.lo) + " elements before its data pointer");
  }
  return x;
}

void for_each_index(ThreadPool* pool, size_t n, const std::function<void(size_t)>& fn) {
  if (pool != nullptr && n > 1) {
    pool->parallel_for(n, fn);
    return;
  }
  for (size_t k = 0; k < n; ++k) fn(k);
}

// The CUDA views of one device: planned and executed together.
struct DeviceGather {
  int device = 0;
  std::vector<size_t> tensors;        // indices into refs
  std::vector<int64_t> first;         // first element's offset within its slice, elements
  std::vector<CopyRequest> requests;  // one per tensor
  std::unique_ptr<CudaStagedCopies> staged;
};

std::string describe(std::span<const TensorRef> refs, const DeviceGather& g) {
  std::string s = "tensor '" + refs[g.tensors.front()].name + "'";
  if (g.tensors.size() > 1) s += " and " + std::to_string(g.tensors.size() - 1) + " more";
  return "gathering " + s + " from CUDA device " + std::to_string(g.device);
}

// The view's dims without those of size 1, adjacent ones merged where the outer steps over
// the inner exactly; the row-major order of the elements is unchanged. Never empty.
struct Dim {
  int64_t size, stride;
};
std::vector<Dim> collapse(const TensorRef& ref) {
  const std::vector<int64_t> strides = ref.effective_strides();
  std::vector<Dim> dims;
  for (size_t d = 0; d < ref.shape.size(); ++d) {
    if (ref.shape[d] == 1) continue;
    const Dim next{ref.shape[d], strides[d]};
    if (!dims.empty() && dims.back().stride == next.stride * next.size) {
      dims.back() = {dims.back().size * next.size, next.stride};
    } else {
      dims.push_back(next);
    }
  }
  if (dims.empty()) dims.push_back({1, 1});
  return dims;
}

// Owners for the host-to-device path. Declared pinned, stream, event: the stream is
// synchronized (its copies read the pinned buffer) before the buffer is freed.
struct PinnedBuffer {
  uint8_t* p = nullptr;
  ~PinnedBuffer() {
    if (p != nullptr) (void)cudaFreeHost(p);
  }
};
struct OwnedStream {
  cudaStream_t s = nullptr;
  ~OwnedStream() {
    if (s == nullptr) return;
    (void)cudaStreamSynchronize(s);
    (void)cudaStreamDestroy(s);
  }
};
struct OwnedEvent {
  cudaEvent_t e = nullptr;
  ~OwnedEvent() {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
};

}  // namespace

// Strided views are staged as their covering extent, one request each, and their elements
// picked from the pinned copy on the host: one DMA per tensor whatever its strides, where a
// request per contiguous run would cost a cudaMemcpyAsync per row or per element (a column
// slice of a [E, R, C] parameter: E * R calls), and the covering extent of a slice of a
// packed parameter is at most that parameter. Reading the elements between a view's own is
// harmless on this side (nothing is written); scatter must not do the same.
Status gather_cuda_tensors(std::span<const TensorRef> refs,
                           std::span<const std::span<uint8_t>> outs,
                           std::span<const size_t> indices, ThreadPool* pool,
                           const std::function<void()>& overlap) {
  DeviceGuard guard;  // first: restores the device after the staging below is freed
  std::vector<DeviceGather> groups;
  std::map<int, size_t> group_of;
  for (size_t i : indices) {
    if (refs[i].numel() == 0) continue;
    auto [it, fresh] = group_of.try_emplace(refs[i].device, groups.size());
    if (fresh) groups.emplace_back().device = refs[i].device;
    groups[it->second].tensors.push_back(i);
  }
  for (DeviceGather& g : groups) {
    RETURN_IF_ERROR(guard.set(g.device, refs[g.tensors.front()]));
    // Views sharing a data pointer share a source, as long as the furthest extent reaches.
    std::map<const void*, uint32_t> source_of;
    std::vector<const uint8_t*> sources;
    std::vector<uint64_t> source_bytes;
    for (size_t i : g.tensors) {
      const TensorRef& ref = refs[i];
      RETURN_IF_ERROR(check_device_pointer(ref));
      ASSIGN_OR_RETURN(const Extent x, covering_extent(ref));
      auto [it, fresh] = source_of.try_emplace(ref.data, static_cast<uint32_t>(sources.size()));
      if (fresh) {
        sources.push_back(static_cast<const uint8_t*>(ref.data));
        source_bytes.push_back(0);
      }
      const auto es = static_cast<uint64_t>(ref.element_size());
      source_bytes[it->second] = std::max(source_bytes[it->second], x.hi * es);
      g.first.push_back(ref.offset - x.lo);
      g.requests.push_back(
          {ref.name, it->second, 0, x.lo * es, (x.hi - x.lo) * es, ref.dtype, ref.shape});
    }
    for (CopyRequest& r : g.requests) r.source_bytes = source_bytes[r.source];
    const CopyPlan plan = plan_copies(g.requests);
    auto staged = execute_copy_plan_cuda(plan, g.requests, sources, g.device);
    if (!staged.ok()) return staged.status().with_context(describe(refs, g));
    g.staged = std::move(staged).value();
  }
  if (overlap) overlap();
  for (DeviceGather& g : groups) {
    if (Status s = g.staged->wait(kCopyDeadline); !s.ok()) {
      return s.with_context(describe(refs, g));
    }
    for_each_index(pool, g.tensors.size(), [&](size_t k) {
      const TensorRef& ref = refs[g.tensors[k]];
      const uint8_t* first =
          g.staged->slice(k).data() + g.first[k] * static_cast<int64_t>(ref.element_size());
      gather_host_view(ref, first, outs[g.tensors[k]]);
    });
  }
  return ok_status();
}

// Writes only the view's elements: the blocks of the collapsed view (rows of a last
// dimension with stride 1, else single elements, each block spanning the next dimension
// out) go one cudaMemcpy2DAsync each, or one cudaMemcpyAsync per run where the pitch does not
// suit cudaMemcpy2D (negative, overlapping, or beyond cudaDevAttrMaxPitch). The pinned
// staging is allocated per call: simple, and a subscriber scatters once per version.
Status scatter_cuda_tensor(std::span<const uint8_t> in, const TensorRef& ref) {
  if (in.empty()) return ok_status();
  DeviceGuard guard;
  RETURN_IF_ERROR(guard.set(ref.device, ref));
  RETURN_IF_ERROR(check_device_pointer(ref));
  int max_pitch = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, ref.device);
      e != cudaSuccess) {
    return cuda_error(ref, "cudaDeviceGetAttribute(cudaDevAttrMaxPitch)", e);
  }
  PinnedBuffer pinned;
  if (cudaError_t e = cudaMallocHost(&pinned.p, in.size()); e != cudaSuccess) {
    return cuda_error(ref, "cudaMallocHost of " + std::to_string(in.size()) + " bytes", e);
  }
  std::memcpy(pinned.p, in.data(), in.size());
  OwnedStream stream;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream.s, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return cuda_error(ref, "cudaStreamCreateWithFlags", e);
  }
  OwnedEvent done;
  if (cudaError_t e =
          cudaEventCreateWithFlags(&done.e, cudaEventDisableTiming | cudaEventBlockingSync);
      e != cudaSuccess) {
    return cuda_error(ref, "cudaEventCreateWithFlags", e);
  }

  // A block: `height` runs of `width` bytes, `pitch` bytes apart on the device and
  // consecutive in `in`; the blocks enumerate dims [0, outer) in row-major order.
  const auto es = static_cast<int64_t>(ref.element_size());
  const std::vector<Dim> dims = collapse(ref);
  const Dim last = dims.back();
  int64_t width = es, height = last.size, pitch = last.stride * es;
  size_t outer = dims.size() - 1;
  if (last.stride == 1) {
    width = last.size * es;
    height = 1;
    pitch = width;
    if (dims.size() > 1) {
      height = dims[dims.size() - 2].size;
      pitch = dims[dims.size() - 2].stride * es;
      outer = dims.size() - 2;
    }
  }
  uint64_t blocks = 1;
  for (size_t d = 0; d < outer; ++d) blocks *= static_cast<uint64_t>(dims[d].size);
  const bool two_d = height > 1 && pitch >= width && pitch <= max_pitch;
  uint8_t* first = ref.first_byte();
  for (uint64_t b = 0; b < blocks; ++b) {
    int64_t offset = 0;
    uint64_t rest = b;
    for (size_t d = outer; d-- > 0;) {
      const auto size = static_cast<uint64_t>(dims[d].size);
      offset += static_cast<int64_t>(rest % size) * dims[d].stride;
      rest /= size;
    }
    uint8_t* dst = first + offset * es;
    const uint8_t* src = pinned.p + b * static_cast<uint64_t>(height * width);
    if (two_d) {
      if (cudaError_t e = cudaMemcpy2DAsync(dst, pitch, src, width, width, height,
                                            cudaMemcpyHostToDevice, stream.s);
          e != cudaSuccess) {
        return cuda_error(ref,
                          "cudaMemcpy2DAsync (host to device, block " + std::to_string(b) + " of " +
                              std::to_string(blocks) + ")",
                          e);
      }
      continue;
    }
    for (int64_t h = 0; h < height; ++h) {
      if (cudaError_t e = cudaMemcpyAsync(dst + h * pitch, src + h * width, width,
                                          cudaMemcpyHostToDevice, stream.s);
          e != cudaSuccess) {
        return cuda_error(ref,
                          "cudaMemcpyAsync (host to device, run " + std::to_string(h) +
                              " of block " + std::to_string(b) + ")",
                          e);
      }
    }
  }
  if (cudaError_t e = cudaEventRecord(done.e, stream.s); e != cudaSuccess) {
    return cuda_error(ref, "cudaEventRecord", e);
  }
  if (cudaError_t e = cudaEventSynchronize(done.e); e != cudaSuccess) {
    return cuda_error(ref, "cudaEventSynchronize (host-to-device copies)", e);
  }
  return ok_status();
}

}  // namespace weightcast
