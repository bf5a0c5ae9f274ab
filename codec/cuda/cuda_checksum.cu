// C() (docs/FORMATS.md, the checksum) on the GPU. Contiguous 16-byte-aligned ranges of 1-, 2- and
// 4-byte elements take the fast path: each thread loads 16 bytes at a time (four loads in flight),
// computes S = sum m and W = sum (j + 1) m over the vector's elements with 32x32->64-bit
// multiplies, and adds g * S + W for the vector's first global index g (the weights are
// g + j + 1); partial sums
// are reduced per warp and added atomically (mod 2^64, like the definition). Strided views
// and unaligned or 8-byte elements take a per-element path that unravels the index.
#include <cuda_runtime.h>

#include <cstring>

#include "codec/checksum.h"
#include "codec/cuda/cuda_support.h"
#include "codec/cuda_codec.h"

namespace weightcast::cuda_codec {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

__device__ inline unsigned long long warp_sum(unsigned long long v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, off);
  return v;
}

__device__ inline void add_block_total(unsigned long long acc, unsigned long long* out) {
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

// (g + 1) .. (g + VEC) weights over the elements of one 16-byte vector.
template <typename U>
__device__ inline uint64_t vector_term(const uint4& v, uint64_t g) {
  constexpr int kVec = 16 / sizeof(U);
  U e[kVec];
  memcpy(e, &v, 16);
  uint64_t s = 0, w = 0;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const uint32_t m = checksum_fmix32(static_cast<uint32_t>(e[j]) ^ kChecksumSeed32);
    s += m;
    w += static_cast<uint64_t>(j + 1) * m;
  }
  return g * s + w;
}

template <typename U>
__global__ void checksum_vectors_kernel(const uint4* data, uint64_t vectors, uint64_t first,
                                        unsigned long long* out) {
  constexpr int kVec = 16 / sizeof(U);
  uint64_t acc = 0;
  const uint64_t stride = uint64_t{gridDim.x} * kThreads * kUnroll;
  for (uint64_t base = uint64_t{blockIdx.x} * kThreads * kUnroll + threadIdx.x; base < vectors;
       base += stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t i = base + static_cast<uint64_t>(u) * kThreads;
      if (i < vectors) v[u] = data[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t i = base + static_cast<uint64_t>(u) * kThreads;
      if (i < vectors) acc += vector_term<U>(v[u], first + i * kVec);
    }
  }
  add_block_total(acc, out);
}

// One element at a time: element k of the view (global index first + k) at base + offset * es.
template <typename U>
__global__ void checksum_elements_kernel(const uint8_t* base, DeviceView view, uint64_t count,
                                         uint64_t first, unsigned long long* out) {
  uint64_t acc = 0;
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t k = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < count; k += stride) {
    U bits;
    memcpy(&bits, base + view.offset_of(k) * static_cast<int64_t>(sizeof(U)), sizeof(U));
    acc += (first + k + 1) * checksum_mix(static_cast<uint64_t>(bits), sizeof(U));
  }
  add_block_total(acc, out);
}

unsigned grid_for(uint64_t work_items, const Workspace& ws) {
  const uint64_t wanted = (work_items + kThreads - 1) / kThreads;
  const uint64_t cap = uint64_t{static_cast<unsigned>(ws.multiprocessors())} * 8;
  return static_cast<unsigned>(wanted < 1 ? 1 : wanted > cap ? cap : wanted);
}

template <typename U>
Status launch_typed(const uint8_t* p, const DeviceView& view, uint64_t count, uint64_t first,
                    unsigned long long* out, const Workspace& ws, const std::string& who) {
  constexpr uint64_t kVec = sizeof(U) <= 4 ? 16 / sizeof(U) : 1;
  const bool vectors = sizeof(U) <= 4 && view.contiguous &&
                       reinterpret_cast<uintptr_t>(p) % 16 == 0 && count >= kVec;
  uint64_t done = 0;
  if (vectors) {
    const uint64_t n = count / kVec;
    checksum_vectors_kernel<U><<<grid_for(n / kUnroll, ws), kThreads, 0, ws.stream()>>>(
        reinterpret_cast<const uint4*>(p), n, first, out);
    WC_CUDA_LAUNCHED("checksum_vectors_kernel", who);
    done = n * kVec;
  }
  if (done < count) {  // the tail of a vectorised range, or the whole view
    DeviceView rest = view;
    const uint8_t* base = p;
    if (done > 0) base = p + done * sizeof(U);  // contiguous here
    checksum_elements_kernel<U><<<grid_for(count - done, ws), kThreads, 0, ws.stream()>>>(
        base, rest, count - done, first + done, out);
    WC_CUDA_LAUNCHED("checksum_elements_kernel", who);
  }
  return ok_status();
}

}  // namespace

Status launch_checksum(const uint8_t* first_byte, const DeviceView& view, size_t elem_size,
                       uint64_t count, uint64_t first_index, unsigned long long* out,
                       const Workspace& ws, const std::string& who) {
  if (count == 0) return ok_status();
  switch (elem_size) {
    case 1:
      return launch_typed<uint8_t>(first_byte, view, count, first_index, out, ws, who);
    case 2:
      return launch_typed<uint16_t>(first_byte, view, count, first_index, out, ws, who);
    case 4:
      return launch_typed<uint32_t>(first_byte, view, count, first_index, out, ws, who);
    case 8:
      return launch_typed<uint64_t>(first_byte, view, count, first_index, out, ws, who);
    default:
      return invalid_argument(who + ": no checksum for " + std::to_string(elem_size) +
                              "-byte elements");
  }
}

bool device_usable(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (why != nullptr) {
      *why = e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)
                              : "no CUDA device";
    }
    return false;
  }
  return true;
}

Result<uint64_t> checksum_view(const TensorRef& view, uint64_t first_index) {
  const std::string who = "tensor '" + view.name + "'";
  ASSIGN_OR_RETURN(const DeviceView dv, describe_device_view(view));
  Workspace* ws = nullptr;
  ASSIGN_OR_RETURN(ws, Workspace::get(view.device, who));
  uint8_t* result = nullptr;
  ASSIGN_OR_RETURN(result, ws->buffer(Workspace::kResult, 64, who));
  uint8_t* host = nullptr;
  ASSIGN_OR_RETURN(host, ws->buffer(Workspace::kPerChunkHost, 64, who));
  auto* out = reinterpret_cast<unsigned long long*>(result);
  WC_CUDA_TRY(cudaMemsetAsync(out, 0, 8, ws->stream()), who);
  RETURN_IF_ERROR(launch_checksum(view.first_byte(), dv, view.element_size(), view.numel(),
                                  first_index, out, *ws, who));
  WC_CUDA_TRY(cudaMemcpyAsync(host, out, 8, cudaMemcpyDeviceToHost, ws->stream()), who);
  RETURN_IF_ERROR(ws->sync(who + " (checksum)"));
  uint64_t c = 0;
  std::memcpy(&c, host, 8);
  return c;
}

}  // namespace weightcast::cuda_codec
