// A snapshot of a CUDA tensor kept in device memory (the group config's
// `publisher.snapshot: device`, docs/CONFIG.md): the publisher then diffs the live tensor
// against it on the GPU (codec/cuda_codec.h encode_delta), so only the record bytes leave the
// device, and brings it to the new version with one device-to-device copy.
//
// In builds without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0) allocate() fails with a clear
// error. Every CUDA call is checked; errors name the tensor and CUDA's message. Calls restore
// the calling thread's current device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"

namespace weightcast {

class DeviceSnapshot {
 public:
  // Device memory for a contiguous copy of `live` (a contiguous CUDA tensor), on its device.
  static Result<std::unique_ptr<DeviceSnapshot>> allocate(const TensorRef& live);
  ~DeviceSnapshot();
  DeviceSnapshot(const DeviceSnapshot&) = delete;
  DeviceSnapshot& operator=(const DeviceSnapshot&) = delete;

  // The snapshot as a contiguous CUDA view with live's name, dtype and shape.
  const TensorRef& view() const { return view_; }
  // Copies the live tensor's bytes into the snapshot (device to device) and waits for it.
  [[nodiscard]] Status copy_from_live();

 private:
  DeviceSnapshot() = default;
  TensorRef live_;
  TensorRef view_;
  void* memory_ = nullptr;
};

}  // namespace weightcast
