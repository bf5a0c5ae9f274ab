// What the codec's CUDA tests share: a skip that says why when no GPU is usable, device memory
// holding a copy of host bytes, encode options and the resealing of an edited record.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <xxhash.h>

#include "codec/base/byte_io.h"
#include "codec/cuda_codec.h"
#include "codec/delta_encoder.h"
#include "codec/tensor_ref.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                      \
    std::string why;                                                                        \
    if (!cuda_codec::device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why; \
  } while (0)

namespace weightcast::testing {

// Options of a record covering global elements from 1000 on, version 4 to 5.
inline EncodeOptions encode_options(DType dtype, uint32_t chunk, uint32_t modes) {
  EncodeOptions o;
  o.name = "w";
  o.dtype = dtype;
  o.chunk_elements = chunk;
  o.allowed_modes = modes;
  o.base_version = 4;
  o.target_version = 5;
  o.range_offset = 1000;
  o.tensor_elements = 0;
  return o;
}

// A new XXH3 trailer for a record whose bytes a test edited, so only deeper checks see the edit.
inline void reseal(std::vector<uint8_t>* record) {
  const size_t body = record->size() - kDeltaTrailerBytes;
  store_le<uint64_t>(record->data() + body, XXH3_64bits(record->data(), body));
}

#if WEIGHTCAST_HAVE_CUDA
// Device memory holding a copy of `bytes` (plus `pad` bytes before, to test unaligned views).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<uint8_t>& bytes, size_t pad = 0) : size_(bytes.size()) {
    EXPECT_EQ(cudaMalloc(&base_, size_ + pad + 16), cudaSuccess);
    data_ = static_cast<uint8_t*>(base_) + pad;
    EXPECT_EQ(cudaMemcpy(data_, bytes.data(), size_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* data() const { return data_; }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(size_);
    EXPECT_EQ(cudaMemcpy(out.data(), data_, size_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  TensorRef view(DType dtype, const std::string& name = "dev") const {
    TensorRef r =
        TensorRef::contiguous(name, dtype, data_, static_cast<int64_t>(size_ / dtype_size(dtype)));
    r.memory = MemoryKind::kCuda;
    r.device = 0;
    return r;
  }

 private:
  void* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t size_;
};
#endif

}  // namespace weightcast::testing
