// Why the NCCL tests cannot run here, shared by the suites of tests/transport_nccl: they need
// a usable CUDA device and a loadable NCCL (nccl_library.h), and skip saying which is missing.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "codec/cuda_codec.h"
#include "transport/nccl/nccl_library.h"

namespace weightcast::nccl {

// "" when a GPU and NCCL are usable (the NCCL found is printed once), else the reason.
inline std::string nccl_gpu_unusable() {
  std::string why;
  if (!cuda_codec::device_usable(&why)) return "no usable CUDA device: " + why;
  auto lib = load_nccl();
  if (!lib.ok()) return "NCCL not loadable: " + lib.status().message();
  static const bool printed = [&] {
    std::printf("NCCL %d from %s\n", (*lib)->version, (*lib)->path.c_str());
    return true;
  }();
  (void)printed;
  return "";
}

}  // namespace weightcast::nccl

#define SKIP_WITHOUT_NCCL_GPU()                                           \
  do {                                                                    \
    const std::string unusable = ::weightcast::nccl::nccl_gpu_unusable(); \
    if (!unusable.empty()) GTEST_SKIP() << unusable;                      \
  } while (0)
