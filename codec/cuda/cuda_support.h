// What every CUDA codec file needs: checked CUDA calls whose errors name the call, the tensor
// and CUDA's message, and a per-thread, per-device workspace (a stream and scratch buffers
// that grow and are kept, so steady-state encode/apply allocate nothing).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"

namespace weightcast::cuda_codec {

Status cuda_error(const char* call, const std::string& who, cudaError_t e);

// Evaluates a CUDA runtime call; on failure returns a Status naming it and `who`.
#define WC_CUDA_TRY(call, who)                                             \
  do {                                                                     \
    const cudaError_t wc_cuda_e_ = (call);                                 \
    if (wc_cuda_e_ != cudaSuccess)                                         \
      return ::weightcast::cuda_codec::cuda_error(#call, who, wc_cuda_e_); \
  } while (0)

// After a kernel launch: the launch error, named after the kernel.
#define WC_CUDA_LAUNCHED(kernel, who) \
  WC_CUDA_TRY(cudaGetLastError(), who + " (launching " kernel ")")

class Workspace {
 public:
  enum Slot : int {
    kPositions,
    kValues,
    kPerChunk,
    kPerChunkHost,  // pinned
    kPayload,
    kPayloadHost,  // pinned
    kUndo,
    kResult,
    kSlotCount
  };
  // The calling thread's workspace for `device`, made current. Errors name `who`.
  static Result<Workspace*> get(int device, const std::string& who);
  ~Workspace();

  cudaStream_t stream() const { return stream_; }
  int multiprocessors() const { return sms_; }
  // At least `bytes` of device (or, for the *Host slots, pinned host) memory; the contents of
  // a grown buffer are not kept.
  Result<uint8_t*> buffer(Slot slot, size_t bytes, const std::string& who);
  // Waits for the stream; errors name `who`.
  Status sync(const std::string& who);

 private:
  Workspace() = default;
  int device_ = 0;
  int sms_ = 0;
  cudaStream_t stream_ = nullptr;
  uint8_t* ptr_[kSlotCount] = {};
  size_t size_[kSlotCount] = {};
};

// A view's shape and strides for device code (rank <= kMaxViewRank).
constexpr int kMaxViewRank = 8;
struct DeviceView {
  int rank = 0;
  bool contiguous = true;
  int64_t shape[kMaxViewRank] = {};
  int64_t strides[kMaxViewRank] = {};

  __host__ __device__ int64_t offset_of(uint64_t flat) const {
    if (contiguous) return static_cast<int64_t>(flat);
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const auto s = static_cast<uint64_t>(shape[d]);
      off += static_cast<int64_t>(flat % s) * strides[d];
      flat /= s;
    }
    return off;
  }
};

// Checks that `ref` is a valid CUDA view of rank <= kMaxViewRank and describes it.
Result<DeviceView> describe_device_view(const TensorRef& ref);

// Enqueues C() of `count` elements of `view` at `first_byte` (global index of element 0:
// first_index), added into *out (device memory, zeroed by the caller) on `stream`.
Status launch_checksum(const uint8_t* first_byte, const DeviceView& view, size_t elem_size,
                       uint64_t count, uint64_t first_index, unsigned long long* out,
                       const Workspace& ws, const std::string& who);

}  // namespace weightcast::cuda_codec
