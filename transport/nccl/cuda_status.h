// CUDA runtime errors as Status for the NCCL backend: one spelling for the communicator, the
// bucket broadcaster and the broadcast group.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "codec/base/status.h"

namespace weightcast::nccl {

// "<who>: <call> failed: <error name> (<error text>)", kIoError.
inline Status cuda_failed(const std::string& who, const char* call, cudaError_t e) {
  return io_error(who + ": " + call + " failed: " + cudaGetErrorName(e) + " (" +
                  cudaGetErrorString(e) + ")");
}

}  // namespace weightcast::nccl

// Returns cuda_failed(who, "<call>", error) from the enclosing function when `call` fails.
#define WC_NCCL_CUDA(call, who)                                                          \
  do {                                                                                   \
    const cudaError_t wc_e_ = (call);                                                    \
    if (wc_e_ != cudaSuccess) return ::weightcast::nccl::cuda_failed(who, #call, wc_e_); \
  } while (0)
