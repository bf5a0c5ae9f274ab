// The NCCL broadcast group: broadcast_group.h over an epoch's NcclCommunicator, its
// rounds run by a BucketBroadcaster through a broadcast_schedule.h schedule.
//
//  * Ids: make_id() is an ncclUniqueId's 128 raw bytes; join() refuses an id of any other size
//    (naming the rank and the group's size) before touching NCCL.
//  * Memory: every part whose source or destination is device memory (cudaPointerGetAttributes
//    says cudaMemoryTypeDevice on the group's device, or cudaMemoryTypeManaged) is used in
//    place, so bytes stay on the GPU end to end. Host memory (pageable, pinned or registered)
//    is staged through one device allocation per round, as large as the round's host parts
//    together: copied in before the schedule runs (owner's sources), out after it (destinations).
//    Device sources are read on streams ordered after the legacy default stream only: work on
//    other streams that writes them must be complete when broadcast() is called; destinations
//    are complete when it returns.
//  * Buffers: the BucketBroadcaster (its `buffers` staging buffers of `bucket_bytes` on the
//    device) is made by the first broadcast() and kept for the group's life.
//  * Failures: any failure of a round, a wrong span included (a collective cannot be left
//    half-done by one rank), aborts the communicator and breaks the group for good: every later
//    call returns kUnavailable naming the first error at once. A failed round's destinations hold
//    undefined bytes; host ones are no longer written once it returns, device ones may be by copies
//    queued behind the aborted broadcasts until the group is destroyed (its destructor waits for
//    them).
//  * Threads: broadcast() from one thread at a time (a second concurrent one fails, breaking
//    the group); abort() from any thread. While a round is in progress abort() only asks
//    (NcclCommunicator::request_abort) and the broadcasting thread performs ncclCommAbort at
//    its next poll, within ~50 us of a wait; otherwise abort() performs it at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "codec/base/status.h"
#include "transport/nccl/broadcast_group.h"
#include "transport/nccl/bucket_broadcaster.h"
#include "transport/nccl/nccl_communicator.h"

namespace weightcast::nccl {

// From the group config's `nccl:` section (src/control/group_config_nccl.h).
struct NcclBroadcastGroupOptions {
  int device = 0;                             // CUDA device of this member
  uint64_t bucket_bytes = uint64_t{1} << 30;  // per staging buffer (and per broadcast)
  uint32_t buffers = 2;                       // staging buffers, used in turn
};

class NcclBroadcastGroup final : public BroadcastGroup {
 public:
  NcclBroadcastGroup(std::unique_ptr<NcclCommunicator> comm, NcclBroadcastGroupOptions options);
  // Waits for nothing: an aborted communicator is dropped, a healthy one finalized (bounded,
  // nccl_communicator.h).
  ~NcclBroadcastGroup() override;
  NcclBroadcastGroup(const NcclBroadcastGroup&) = delete;
  NcclBroadcastGroup& operator=(const NcclBroadcastGroup&) = delete;

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  int device() const { return options_.device; }

  [[nodiscard]] Status broadcast(std::span<const SchedulePart> parts,
                                 std::span<const std::span<const uint8_t>> sources,
                                 std::span<const std::span<uint8_t>> destinations,
                                 Deadline deadline) override;
  void abort(const std::string& why) override;

 private:
  // One part's device pointers for the broadcaster, and where host bytes are staged.
  struct Placement;
  // The round itself, on the broadcasting thread; every failure is returned, not recorded.
  Status run_round(std::span<const SchedulePart> parts,
                   std::span<const std::span<const uint8_t>> sources,
                   std::span<const std::span<uint8_t>> destinations, Deadline deadline);
  // Checks the spans of every part and says which memory each is in.
  Status place(std::span<const SchedulePart> parts,
               std::span<const std::span<const uint8_t>> sources,
               std::span<const std::span<uint8_t>> destinations, Placement* out);
  std::string who() const;

  const NcclBroadcastGroupOptions options_;
  std::unique_ptr<NcclCommunicator> comm_;
  std::unique_ptr<BucketBroadcaster> caster_;  // made by the first round
  cudaStream_t copy_stream_ = nullptr;         // staging copies (non-blocking), made with it
  cudaEvent_t copied_ = nullptr;               // the last staging copy
  uint8_t* kept_staging_ = nullptr;            // a failed round's staging, freed last

  std::mutex mu_;      // guards busy_ and failure_ (abort() from other threads)
  bool busy_ = false;  // a round is in progress on some thread
  Status failure_;     // the first failure: sticky
};

class NcclBroadcastGroupFactory final : public BroadcastGroupFactory {
 public:
  explicit NcclBroadcastGroupFactory(NcclBroadcastGroupOptions options = {}) : options_(options) {}

  std::string name() const override { return "nccl"; }
  // An ncclUniqueId's 128 raw bytes.
  [[nodiscard]] Result<std::string> make_id() override;
  // NcclCommunicator::join on the options' device with the time left to `deadline`; fails on
  // an id that is not 128 bytes or options that cannot work, naming the rank and group size.
  [[nodiscard]] Result<std::unique_ptr<BroadcastGroup>> join(const std::string& id, int ranks,
                                                             int rank, Deadline deadline) override;

  const NcclBroadcastGroupOptions& options() const { return options_; }

 private:
  NcclBroadcastGroupOptions options_;
};

}  // namespace weightcast::nccl
