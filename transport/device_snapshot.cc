#include "transport/device_snapshot.h"

#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace weightcast {

#if WEIGHTCAST_HAVE_CUDA
namespace {

// Switches to `device` for the scope and back.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    ok_ = cudaSetDevice(device) == cudaSuccess;
  }
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool ok_ = false;
};

Status cuda_failure(const std::string& what, const std::string& call, cudaError_t e) {
  return io_error(what + ": " + call + " failed: " + cudaGetErrorString(e));
}

}  // namespace

Result<std::unique_ptr<DeviceSnapshot>> DeviceSnapshot::allocate(const TensorRef& live) {
  const std::string what = "device snapshot of tensor '" + live.name + "'";
  if (live.memory != MemoryKind::kCuda || !live.is_contiguous()) {
    return invalid_argument(what + ": the tensor is not a contiguous CUDA tensor");
  }
  DeviceScope scope(live.device);
  if (!scope.ok())
    return io_error(what + ": cannot select CUDA device " + std::to_string(live.device));
  std::unique_ptr<DeviceSnapshot> s(new DeviceSnapshot());
  const size_t bytes = live.numel() * live.element_size();
  if (bytes > 0) {
    if (cudaError_t e = cudaMalloc(&s->memory_, bytes); e != cudaSuccess) {
      s->memory_ = nullptr;
      return cuda_failure(what + " (" + std::to_string(bytes) + " bytes)", "cudaMalloc", e);
    }
  }
  s->live_ = live;
  s->view_ = TensorRef::contiguous(live.name, live.dtype, s->memory_, 0);
  s->view_.shape = live.shape;
  s->view_.memory = MemoryKind::kCuda;
  s->view_.device = live.device;
  return s;
}

DeviceSnapshot::~DeviceSnapshot() {
  if (memory_ == nullptr) return;
  DeviceScope scope(live_.device);
  (void)cudaFree(memory_);
}

Status DeviceSnapshot::copy_from_live() {
  const size_t bytes = live_.numel() * live_.element_size();
  if (bytes == 0) return ok_status();
  DeviceScope scope(live_.device);
  if (cudaError_t e = cudaMemcpy(memory_, live_.first_byte(), bytes, cudaMemcpyDeviceToDevice);
      e != cudaSuccess) {
    return cuda_failure("device snapshot of tensor '" + live_.name + "'", "cudaMemcpy", e);
  }
  return ok_status();
}

#else

Result<std::unique_ptr<DeviceSnapshot>> DeviceSnapshot::allocate(const TensorRef& live) {
  return failed_precondition("device snapshot of tensor '" + live.name +
                             "': this build has no CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)");
}

DeviceSnapshot::~DeviceSnapshot() = default;

Status DeviceSnapshot::copy_from_live() {
  return failed_precondition("device snapshot of tensor '" + live_.name + "': built without CUDA");
}

#endif

}  // namespace weightcast
