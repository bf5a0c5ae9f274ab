// The FP8 block quantiser (codec/fp8_quantize.h) on the GPU that holds the tensor: one thread
// block per 128 x 128 block, its amax reduced in shared memory, then each value divided in fp32
// (__fdiv_rn: the correctly rounded quotient the CPU kernels compute) and encoded with the same
// integer arithmetic as the portable kernel, so the bytes are the CPU quantiser's. Only the
// values (one byte each) and the scales leave the GPU.
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "codec/cuda/cuda_support.h"
#include "codec/cuda_codec.h"
#include "codec/fp8_quantize.h"

namespace weightcast::cuda_codec {
namespace {

constexpr int kThreads = 256;

// Element (r, c) of the view widened to fp32 (exact).
__device__ float load_element(const uint8_t* base, int dtype, int64_t at) {
  if (dtype == 0) {  // bf16
    const uint16_t b = reinterpret_cast<const uint16_t*>(base)[at];
    return __uint_as_float(static_cast<uint32_t>(b) << 16);
  }
  if (dtype == 1) return __half2float(reinterpret_cast<const __half*>(base)[at]);
  return reinterpret_cast<const float*>(base)[at];
}

// 0x80 when element `at` has its sign bit set (read from its bytes, NaN or not), else 0.
__device__ uint32_t negative_bit(const uint8_t* base, int dtype, int64_t at) {
  if (dtype == 2) return (reinterpret_cast<const uint32_t*>(base)[at] >> 24) & 0x80u;
  return (reinterpret_cast<const uint16_t*>(base)[at] >> 8) & 0x80u;
}

// codec/fp8_quantize.cc clamped_to_e4m3fn, on the device.
__device__ uint8_t clamped_to_e4m3fn(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint32_t sign = (bits >> 24) & 0x80u, abits = bits & 0x7FFFFFFFu;
  const float a = __uint_as_float(abits);
  const uint32_t rounded = (abits + (1u << 19) - 1 + ((abits >> 20) & 1u)) >> 20;
  const uint32_t normal = min(rounded - ((127u - 7u) << 3), 0x7Eu);
  uint32_t r = a < 0x1p-6f ? static_cast<uint32_t>(__float2int_rn(a * 512.0f)) : normal;
  r = abits > 0x7F800000u ? 0x7Fu : r;
  return static_cast<uint8_t>(sign | r);
}

__global__ void quantize_kernel(const uint8_t* base, int dtype, int64_t stride0, int64_t stride1,
                                int64_t rows, int64_t cols, uint8_t* q, float* scales) {
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 128,
                c0 = static_cast<int64_t>(blockIdx.x) * 128;
  // The block's amax over the finite magnitudes, as bit patterns (they order as the values).
  uint32_t best = 0;
  for (int e = threadIdx.x; e < 128 * 128; e += kThreads) {
    const int64_t r = r0 + e / 128, c = c0 + e % 128;
    if (r >= rows || c >= cols) continue;
    const uint32_t a =
        __float_as_uint(load_element(base, dtype, r * stride0 + c * stride1)) & 0x7FFFFFFFu;
    best = max(best, a < 0x7F800000u ? a : 0u);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    best = max(best, __shfl_down_sync(0xFFFFFFFFu, best, offset));
  }
  __shared__ uint32_t warp_best[kThreads / 32];
  __shared__ float scale;
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) best = max(best, warp_best[w]);
    scale = __fdiv_rn(fmaxf(__uint_as_float(best), kFp8MinAmax), kFp8Max);
    scales[blockIdx.y * gridDim.x + blockIdx.x] = scale;
  }
  __syncthreads();
  const float s = scale;
  for (int e = threadIdx.x; e < 128 * 128; e += kThreads) {
    const int64_t r = r0 + e / 128, c = c0 + e % 128;
    if (r >= rows || c >= cols) continue;
    const int64_t at = r * stride0 + c * stride1;
    float v = __fdiv_rn(load_element(base, dtype, at), s);
    v = v > kFp8Max ? kFp8Max : v;  // a NaN compares false both ways and stays one
    v = v < -kFp8Max ? -kFp8Max : v;
    // The GPU's division (and maybe its fp16 widening) returns the canonical, positive NaN; the
    // CPU keeps a NaN's sign, and so must the bytes: the sign comes from the input's top bit.
    q[r * cols + c] = isnan(v) ? static_cast<uint8_t>(0x7Fu | negative_bit(base, dtype, at))
                               : clamped_to_e4m3fn(v);
  }
}

}  // namespace

Status quantize_fp8_blocks(const TensorRef& in, std::span<uint8_t> q, std::span<float> scale_inv) {
  const std::string who = "FP8 quantisation of tensor '" + in.name + "'";
  if (in.memory != MemoryKind::kCuda) return invalid_argument(who + ": not in CUDA memory");
  if (in.shape.size() != 2) return invalid_argument(who + ": a 2-D matrix is quantised");
  const int dtype = in.dtype == DType::kBF16  ? 0
                    : in.dtype == DType::kF16 ? 1
                    : in.dtype == DType::kF32 ? 2
                                              : -1;
  if (dtype < 0) {
    return invalid_argument(who + ": bf16, fp16 or fp32 is quantised, not " +
                            std::string(dtype_name(in.dtype)));
  }
  RETURN_IF_ERROR(in.validate());
  const int64_t rows = in.shape[0], cols = in.shape[1];
  const int64_t grid_rows = fp8_scale_rows(rows), grid_cols = fp8_scale_cols(cols);
  if (q.size() != static_cast<size_t>(rows * cols) ||
      scale_inv.size() != static_cast<size_t>(grid_rows * grid_cols)) {
    return invalid_argument(who + ": outputs of the wrong size for a [" + std::to_string(rows) +
                            ", " + std::to_string(cols) + "] matrix");
  }
  if (rows == 0 || cols == 0) return ok_status();
  if (grid_rows > 65535) return invalid_argument(who + ": more than 65535 block rows");
  Workspace* ws = nullptr;
  ASSIGN_OR_RETURN(ws, Workspace::get(in.device, who));
  uint8_t* values = nullptr;
  ASSIGN_OR_RETURN(values, ws->buffer(Workspace::kValues, q.size(), who));
  uint8_t* scales = nullptr;
  ASSIGN_OR_RETURN(scales, ws->buffer(Workspace::kPerChunk, scale_inv.size() * sizeof(float), who));
  const std::vector<int64_t> strides = in.effective_strides();
  const dim3 grid(static_cast<unsigned>(grid_cols), static_cast<unsigned>(grid_rows));
  quantize_kernel<<<grid, kThreads, 0, ws->stream()>>>(
      static_cast<const uint8_t*>(in.data) + in.offset * static_cast<int64_t>(in.element_size()),
      dtype, strides[0], strides[1], rows, cols, values, reinterpret_cast<float*>(scales));
  WC_CUDA_LAUNCHED("quantize_kernel", who);
  WC_CUDA_TRY(cudaMemcpyAsync(q.data(), values, q.size(), cudaMemcpyDeviceToHost, ws->stream()),
              who);
  WC_CUDA_TRY(cudaMemcpyAsync(scale_inv.data(), scales, scale_inv.size() * sizeof(float),
                              cudaMemcpyDeviceToHost, ws->stream()),
              who);
  return ws->sync(who);
}

}  // namespace weightcast::cuda_codec
