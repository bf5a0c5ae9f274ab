#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include "transport/copy_executor_cuda.h"

namespace weightcast {
namespace {

Status cuda_status(cudaError_t e, const std::string& what) {
  return io_error(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace

struct CudaStagedCopies::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<uint8_t*> staging;  // pinned, one per transfer
  std::vector<cudaEvent_t> events;
  std::vector<std::span<const uint8_t>> slices;
  bool cancelled = false;
  Status sticky;
};

bool cuda_device_usable(std::string* why) {
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

CudaStagedCopies::CudaStagedCopies(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaStagedCopies::~CudaStagedCopies() {
  if (!impl_) return;
  cudaSetDevice(impl_->device);
  if (impl_->stream != nullptr) cudaStreamSynchronize(impl_->stream);
  for (cudaEvent_t e : impl_->events) cudaEventDestroy(e);
  for (uint8_t* p : impl_->staging) cudaFreeHost(p);
  if (impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
}

Status CudaStagedCopies::wait(std::chrono::milliseconds deadline) {
  if (!impl_->sticky.ok()) return impl_->sticky;
  if (impl_->cancelled)
    return failed_precondition("CUDA copy plan cancelled; staging released on destruction");
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (size_t t = 0; t < impl_->events.size(); ++t) {
    for (;;) {
      const cudaError_t e = cudaEventQuery(impl_->events[t]);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        impl_->sticky = cuda_status(e, "CUDA transfer " + std::to_string(t));
        return impl_->sticky;
      }
      if (std::chrono::steady_clock::now() > until) {
        return out_of_range("CUDA transfer " + std::to_string(t) + " not done within " +
                            std::to_string(deadline.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return ok_status();
}

std::span<const uint8_t> CudaStagedCopies::slice(size_t request) const {
  return impl_->slices.at(request);
}

size_t CudaStagedCopies::transfer_calls() const {
  return impl_->events.size();
}

Result<std::unique_ptr<CudaStagedCopies>> execute_copy_plan_cuda(
    const CopyPlan& plan, std::span<const CopyRequest> requests,
    std::span<const uint8_t* const> device_sources, int device, const CancelToken* cancel) {
  if (plan.slices.size() != requests.size()) {
    return invalid_argument("CUDA copy plan has " + std::to_string(plan.slices.size()) +
                            " slices for " + std::to_string(requests.size()) + " requests");
  }
  for (const CopyRequest& r : requests) {
    if (r.source >= device_sources.size() || device_sources[r.source] == nullptr ||
        r.offset > r.source_bytes || r.bytes > r.source_bytes - r.offset) {
      return invalid_argument("copy request '" + r.name + "' lies outside its CUDA source " +
                              std::to_string(r.source));
    }
  }
  auto impl = std::make_unique<CudaStagedCopies::Impl>();
  impl->device = device;
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return cuda_status(e, "cudaSetDevice(" + std::to_string(device) + ")");
  }
  if (cudaError_t e = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return cuda_status(e, "cudaStreamCreate");
  }
  // From here `out` owns everything allocated, so every early return frees it.
  auto out = std::make_unique<CudaStagedCopies>(std::move(impl));
  CudaStagedCopies::Impl& s = *out->impl_;
  for (size_t t = 0; t < plan.transfers.size(); ++t) {
    if (cancel != nullptr && cancel->cancelled.load()) {
      s.cancelled = true;
      return std::move(out);  // NOLINT: converts to Result
    }
    const PlannedTransfer& tr = plan.transfers[t];
    uint8_t* pinned = nullptr;
    if (cudaError_t e = cudaMallocHost(&pinned, tr.bytes == 0 ? 1 : tr.bytes); e != cudaSuccess) {
      return cuda_status(e, "cudaMallocHost of " + std::to_string(tr.bytes) + " bytes");
    }
    s.staging.push_back(pinned);
    cudaEvent_t ev = nullptr;
    if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
      return cuda_status(e, "cudaEventCreate");
    }
    s.events.push_back(ev);
    if (cudaError_t e = cudaMemcpyAsync(pinned, device_sources[tr.source] + tr.offset, tr.bytes,
                                        cudaMemcpyDeviceToHost, s.stream);
        e != cudaSuccess) {
      return cuda_status(e, "cudaMemcpyAsync of transfer " + std::to_string(t));
    }
    if (cudaError_t e = cudaEventRecord(ev, s.stream); e != cudaSuccess) {
      return cuda_status(e, "cudaEventRecord");
    }
  }
  s.slices.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestSlice& sl = plan.slices[i];
    s.slices[i] = {s.staging[sl.transfer] + sl.offset, requests[i].bytes};
  }
  return std::move(out);  // NOLINT: converts to Result
}

}  // namespace weightcast
