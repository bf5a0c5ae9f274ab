#include <cuda_runtime.h>

#include <atomic>
#include <thread>
#include <vector>

#include "codec/cuda_codec.h"
#include "transport/copy_executor_cuda.h"

namespace weightcast {
namespace {

Status cuda_status(cudaError_t e, const std::string& what) {
  return io_error(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

std::atomic<uint64_t> g_pinned_bytes{0};

}  // namespace

struct CudaStagedCopies::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  const CancelToken* cancel = nullptr;
  std::vector<uint8_t*> staging;  // pinned, one per enqueued transfer
  std::vector<uint64_t> staging_bytes;
  std::vector<cudaEvent_t> events;
  std::vector<std::span<const uint8_t>> slices;
  size_t planned = 0;   // transfers in the plan
  size_t enqueued = 0;  // cudaMemcpyAsync calls made
  bool cancelled = false;
  bool done = false;  // a wait() succeeded: final
  Status sticky;

  bool cancel_requested() const { return cancel != nullptr && cancel->cancelled.load(); }

  // Drains the stream (enqueued copies still write into the staging), then frees every pinned
  // buffer and event. Idempotent.
  void release_staging() {
    cudaSetDevice(device);
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (size_t i = 0; i < staging.size(); ++i) {
      cudaFreeHost(staging[i]);
      g_pinned_bytes -= staging_bytes[i];
    }
    events.clear();
    staging.clear();
    staging_bytes.clear();
    slices.clear();
  }

  Status cancel_now() {
    cancelled = true;
    release_staging();
    return cancelled_status();
  }

  Status cancelled_status() const {
    return failed_precondition("CUDA copy plan cancelled after " + std::to_string(enqueued) +
                               " of " + std::to_string(planned) +
                               " transfers were enqueued; pinned staging released");
  }
};

uint64_t cuda_pinned_staging_bytes() {
  return g_pinned_bytes.load();
}

bool cuda_device_usable(std::string* why) {
  return cuda_codec::device_usable(why);
}

CudaStagedCopies::CudaStagedCopies(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaStagedCopies::~CudaStagedCopies() {
  if (!impl_) return;
  impl_->release_staging();
  if (impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
}

Status CudaStagedCopies::wait(std::chrono::milliseconds deadline) {
  if (!impl_->sticky.ok()) return impl_->sticky;
  if (impl_->done) return ok_status();
  if (impl_->cancelled) return impl_->cancelled_status();
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (size_t t = 0; t < impl_->events.size(); ++t) {
    for (;;) {
      if (impl_->cancel_requested()) return impl_->cancel_now();
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
  if (impl_->cancel_requested()) return impl_->cancel_now();
  impl_->done = true;
  return ok_status();
}

std::span<const uint8_t> CudaStagedCopies::slice(size_t request) const {
  return impl_->slices.at(request);
}

size_t CudaStagedCopies::transfer_calls() const {
  return impl_->enqueued;
}

uint64_t CudaStagedCopies::pinned_bytes() const {
  uint64_t total = 0;
  for (uint64_t b : impl_->staging_bytes) total += b;
  return total;
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
  impl->cancel = cancel;
  impl->planned = plan.transfers.size();
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
    if (s.cancel_requested()) {
      (void)s.cancel_now();   // wait() reports it
      return std::move(out);  // NOLINT: converts to Result
    }
    const PlannedTransfer& tr = plan.transfers[t];
    const uint64_t bytes = tr.bytes == 0 ? 1 : tr.bytes;
    uint8_t* pinned = nullptr;
    if (cudaError_t e = cudaMallocHost(&pinned, bytes); e != cudaSuccess) {
      return cuda_status(e, "cudaMallocHost of " + std::to_string(tr.bytes) +
                                " bytes for transfer " + std::to_string(t));
    }
    s.staging.push_back(pinned);
    s.staging_bytes.push_back(bytes);
    g_pinned_bytes += bytes;
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
    ++s.enqueued;
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
