#include "transport/nccl/bucket_broadcaster.h"

#include "transport/nccl/cuda_status.h"

namespace weightcast::nccl {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Result<std::unique_ptr<BucketBroadcaster>> BucketBroadcaster::create(NcclCommunicator* comm,
                                                                     uint64_t bucket_bytes,
                                                                     uint32_t buffers) {
  const std::string who = "nccl rank " + std::to_string(comm->rank()) + " bucket staging";
  if (bucket_bytes == 0 || buffers == 0) {
    return invalid_argument(who + ": bucket size and buffer count must be positive");
  }
  std::unique_ptr<BucketBroadcaster> b(new BucketBroadcaster());
  b->comm_ = comm;
  b->bucket_bytes_ = bucket_bytes;
  WC_NCCL_CUDA(cudaSetDevice(comm->device()), who);
  for (uint32_t i = 0; i < buffers; ++i) {
    void* p = nullptr;
    WC_NCCL_CUDA(cudaMalloc(&p, bucket_bytes),
                 who + " (" + std::to_string(bucket_bytes) + " bytes)");
    b->buffers_.push_back(static_cast<uint8_t*>(p));
    cudaStream_t s = nullptr;
    // Blocking: ordered after the caller's work on the legacy default stream.
    WC_NCCL_CUDA(cudaStreamCreate(&s), who);
    b->streams_.push_back(s);
    cudaEvent_t e = nullptr;
    WC_NCCL_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), who);
    b->events_.push_back(e);
  }
  return b;
}

BucketBroadcaster::~BucketBroadcaster() {
  cudaSetDevice(comm_->device());
  for (cudaStream_t s : streams_) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (uint8_t* p : buffers_) cudaFree(p);
}

Status BucketBroadcaster::run_unguarded(const BroadcastSchedule& schedule,
                                        std::span<const PartBuffers> parts,
                                        const std::function<Status(uint32_t)>& on_part,
                                        std::chrono::milliseconds deadline) {
  const auto until = Clock::now() + deadline;
  const int me = comm_->rank();
  WC_NCCL_CUDA(cudaSetDevice(comm_->device()), "nccl rank " + std::to_string(me));
  // Bytes still to arrive per part; a part is handed on when its count reaches zero (an empty
  // part at once).
  std::vector<uint64_t> pending(parts.size(), 0);
  for (const Bucket& b : schedule.buckets) {
    for (const BucketSegment& seg : b.segments) {
      if (seg.part >= parts.size()) {
        return invalid_argument("nccl rank " + std::to_string(me) + ": the schedule names part " +
                                std::to_string(seg.part) + " of " + std::to_string(parts.size()));
      }
      pending[seg.part] += seg.bytes;
    }
  }
  for (uint32_t p = 0; p < parts.size(); ++p) {
    if (pending[p] == 0 && parts[p].destination != nullptr) RETURN_IF_ERROR(on_part(p));
  }

  // Hands on the parts that bucket k completed, once its copy-out finished.
  auto finish_bucket = [&](size_t k) -> Status {
    const Bucket& b = schedule.buckets[k];
    RETURN_IF_ERROR(comm_->wait(events_[b.buffer], until));
    for (const BucketSegment& seg : b.segments) {
      pending[seg.part] -= seg.bytes;
      if (pending[seg.part] == 0 && parts[seg.part].destination != nullptr) {
        RETURN_IF_ERROR(on_part(seg.part));
      }
    }
    return ok_status();
  };

  for (size_t k = 0; k < schedule.buckets.size(); ++k) {
    const Bucket& b = schedule.buckets[k];
    const std::string who = "nccl rank " + std::to_string(me) + " bucket " + std::to_string(k) +
                            " (" + std::to_string(b.bytes) + " bytes from rank " +
                            std::to_string(b.root) + ")";
    if (b.buffer >= buffers_.size() || b.bytes > bucket_bytes_) {
      return invalid_argument(who + ": the schedule was made for other buckets");
    }
    uint8_t* buf = buffers_[b.buffer];
    cudaStream_t stream = streams_[b.buffer];
    if (b.root == me) {
      for (const BucketSegment& seg : b.segments) {
        const uint8_t* src = parts[seg.part].source;
        if (src == nullptr)
          return invalid_argument(who + ": part " + std::to_string(seg.part) +
                                  " has no source on its owner");
        WC_NCCL_CUDA(cudaMemcpyAsync(buf + seg.bucket_offset, src + seg.part_offset, seg.bytes,
                                     cudaMemcpyDeviceToDevice, stream),
                     who);
      }
    }
    RETURN_IF_ERROR(
        comm_->enqueue_broadcast(buf, b.bytes, b.root, stream, events_[b.buffer], until));
    for (const BucketSegment& seg : b.segments) {
      uint8_t* dst = parts[seg.part].destination;
      if (dst == nullptr || (b.root == me && dst == parts[seg.part].source)) continue;
      WC_NCCL_CUDA(cudaMemcpyAsync(dst + seg.part_offset, buf + seg.bucket_offset, seg.bytes,
                                   cudaMemcpyDeviceToDevice, stream),
                   who);
    }
    WC_NCCL_CUDA(cudaEventRecord(events_[b.buffer], stream), who);
    if (k > 0) RETURN_IF_ERROR(finish_bucket(k - 1));  // overlaps bucket k in flight
  }
  if (!schedule.buckets.empty()) RETURN_IF_ERROR(finish_bucket(schedule.buckets.size() - 1));
  return ok_status();
}

Status BucketBroadcaster::run(const BroadcastSchedule& schedule, std::span<const PartBuffers> parts,
                              const std::function<Status(uint32_t)>& on_part,
                              std::chrono::milliseconds deadline) {
  Status s = run_unguarded(schedule, parts, on_part, deadline);
  // Whatever failed, this rank will not take part in the rest of the schedule: abort, so that
  // nothing of ours stays queued on the communicator and later calls fail at once.
  if (!s.ok() && !comm_->aborted()) comm_->abort(s.message());
  return s;
}

}  // namespace weightcast::nccl
