#include "codec/cuda/cuda_support.h"

#include <map>
#include <memory>

namespace weightcast::cuda_codec {

Status cuda_error(const char* call, const std::string& who, cudaError_t e) {
  return io_error(who + ": " + call + " failed: " + cudaGetErrorName(e) + " (" +
                  cudaGetErrorString(e) + ")");
}

Result<Workspace*> Workspace::get(int device, const std::string& who) {
  thread_local std::map<int, std::unique_ptr<Workspace>> by_device;
  WC_CUDA_TRY(cudaSetDevice(device), who + " (device " + std::to_string(device) + ")");
  (void)cudaGetLastError();  // an earlier failed call must not be reported as ours
  auto& slot = by_device[device];
  if (!slot) {
    std::unique_ptr<Workspace> ws(new Workspace());
    ws->device_ = device;
    // A blocking stream: ordered after work the caller left on the legacy default stream
    // (cudaMemset, cudaMemcpy whose device side is still running), so inputs are complete.
    WC_CUDA_TRY(cudaStreamCreate(&ws->stream_), who);
    WC_CUDA_TRY(cudaDeviceGetAttribute(&ws->sms_, cudaDevAttrMultiProcessorCount, device), who);
    slot = std::move(ws);
  }
  return slot.get();
}

Workspace::~Workspace() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (int s = 0; s < kSlotCount; ++s) {
    if (ptr_[s] == nullptr) continue;
    if (s == kPerChunkHost || s == kPayloadHost) {
      cudaFreeHost(ptr_[s]);
    } else {
      cudaFree(ptr_[s]);
    }
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Result<uint8_t*> Workspace::buffer(Slot slot, size_t bytes, const std::string& who) {
  if (bytes <= size_[slot] && ptr_[slot] != nullptr) return ptr_[slot];
  const bool host = slot == kPerChunkHost || slot == kPayloadHost;
  if (ptr_[slot] != nullptr) {
    WC_CUDA_TRY(cudaStreamSynchronize(stream_), who);  // the old buffer may still be in use
    if (host) {
      WC_CUDA_TRY(cudaFreeHost(ptr_[slot]), who);
    } else {
      WC_CUDA_TRY(cudaFree(ptr_[slot]), who);
    }
    ptr_[slot] = nullptr;
    size_[slot] = 0;
  }
  const size_t grown = bytes < 4096 ? 4096 : bytes + bytes / 8;
  void* p = nullptr;
  if (host) {
    WC_CUDA_TRY(cudaMallocHost(&p, grown), who + " (" + std::to_string(grown) + " pinned bytes)");
  } else {
    WC_CUDA_TRY(cudaMalloc(&p, grown), who + " (" + std::to_string(grown) + " device bytes)");
  }
  ptr_[slot] = static_cast<uint8_t*>(p);
  size_[slot] = grown;
  return ptr_[slot];
}

Status Workspace::sync(const std::string& who) {
  WC_CUDA_TRY(cudaStreamSynchronize(stream_), who);
  return ok_status();
}

Result<DeviceView> describe_device_view(const TensorRef& ref) {
  RETURN_IF_ERROR(ref.validate());
  if (ref.memory != MemoryKind::kCuda) {
    return invalid_argument("tensor '" + ref.name + "': expected CUDA memory");
  }
  if (ref.shape.size() > static_cast<size_t>(kMaxViewRank)) {
    return invalid_argument("tensor '" + ref.name + "': rank " + std::to_string(ref.shape.size()) +
                            " exceeds the CUDA codec's " + std::to_string(kMaxViewRank));
  }
  DeviceView v;
  v.rank = static_cast<int>(ref.shape.size());
  v.contiguous = ref.is_contiguous();
  const auto strides = ref.effective_strides();
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = ref.shape[d];
    v.strides[d] = strides[d];
  }
  return v;
}

}  // namespace weightcast::cuda_codec
