// Moving one version's parts through a broadcast schedule (broadcast_schedule.h) over an
// epoch's communicator. For each bucket, on stream `k % buffers`: the root copies
// the bucket's segments out of its parts into staging buffer k % buffers, the communicator
// broadcasts the buffer, and every rank with a destination for a segment copies it out. A
// buffer's next use is ordered after its previous copy-out by its stream, and bucket k's parts
// are handed to `on_part` while bucket k + 1 is in flight: receiving overlaps applying.
// Bytes stay on the GPUs end to end. Every wait has the run's deadline; on a failure the
// communicator is aborted (nccl_communicator.h) and the error names the bucket; so is it on
// any other failure of a run (a failing on_part, a CUDA error), so no rank's work stays queued.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "codec/base/status.h"
#include "transport/nccl/broadcast_schedule.h"
#include "transport/nccl/nccl_communicator.h"

namespace weightcast::nccl {

struct PartBuffers {
  const uint8_t* source = nullptr;  // device memory of the part on its owner rank, else null
  uint8_t* destination = nullptr;   // device memory receiving the part here, or null (skip)
};

class BucketBroadcaster {
 public:
  // Allocates `buffers` staging buffers of `bucket_bytes` on the communicator's device.
  static Result<std::unique_ptr<BucketBroadcaster>> create(NcclCommunicator* comm,
                                                           uint64_t bucket_bytes, uint32_t buffers);
  ~BucketBroadcaster();
  BucketBroadcaster(const BucketBroadcaster&) = delete;
  BucketBroadcaster& operator=(const BucketBroadcaster&) = delete;

  // Runs `schedule` (made with this broadcaster's bucket size and buffer count). `parts[i]`
  // are part i's buffers on this rank; `on_part(i)` runs on this thread once part i's bytes
  // are all in its destination (parts without a destination are not reported).
  Status run(const BroadcastSchedule& schedule, std::span<const PartBuffers> parts,
             const std::function<Status(uint32_t part)>& on_part,
             std::chrono::milliseconds deadline);

  uint64_t bucket_bytes() const { return bucket_bytes_; }
  uint32_t buffers() const { return static_cast<uint32_t>(buffers_.size()); }

 private:
  BucketBroadcaster() = default;
  Status run_unguarded(const BroadcastSchedule& schedule, std::span<const PartBuffers> parts,
                       const std::function<Status(uint32_t part)>& on_part,
                       std::chrono::milliseconds deadline);
  NcclCommunicator* comm_ = nullptr;
  uint64_t bucket_bytes_ = 0;
  std::vector<uint8_t*> buffers_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;  // one per buffer: its last bucket's copy-out
};

}  // namespace weightcast::nccl
