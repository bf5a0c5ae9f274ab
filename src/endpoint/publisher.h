// The publisher endpoint a trainer embeds (docs/ARCHITECTURE.md §1): register the
// model's tensors once, then publish(version) after every optimizer step (snapshot mode), or
// write each step's new values through a PublishStep (hooked mode, publish_step.h).
//
// publish() returns at once with a handle; a worker then, in order:
//   1. waits until fewer than max_in_flight published versions are uncommitted (the group's
//      back-pressure),
//   2. (hooked mode) runs the guard of the step's tensors (publish_step.h); reads the
//      snapshot tensors it cannot read where they live (strided views, CUDA memory) in
//      bounded pieces, diffing each against the snapshot and copying it over (no second
//      copy); contiguous host tensors are read in place,
//   3. writes the version to the journal (a delta against its snapshot of the previous
//      published version, or an anchor: the first version, every anchor_every, when the
//      tensors changed shape), bringing the snapshot to the new version in the same pass
//      (one copy of the model, not two: transport/fs/journal_writer.h SnapshotAdvance);
//      wait_for_reads() returns once the trainer's tensors were read for the last time (for
//      an anchor, before its files are written from the snapshot), and the trainer may then
//      change its weights again,
//   4. serves the version's delta on every live path the group's transports list and this
//      host can run (src/endpoint/live_path.h: ucx from its memory, nccl by the ready
//      epoch's broadcast), and offers it to the coordinator with every tensor's checksum and
//      the descriptor each path returned.
// wait_committed() returns once every live subscriber acked it. A publisher restarted on an
// existing journal rebuilds its previous version from the journal (verified) before its
// first delta. Versions must increase; an error leaves the journal on the previous version.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/serial_executor.h"
#include "codec/base/status.h"
#include "codec/base/thread_pool.h"
#include "codec/fp8_selection.h"
#include "codec/tensor_ref.h"
#include "src/endpoint/group_credit.h"
#include "src/endpoint/live_path.h"
#include "src/endpoint/publish_step.h"
#include "src/endpoint/rank_link.h"
#include "transport/device_snapshot.h"
#include "transport/fs/journal_writer.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

using EndpointDeadline = std::chrono::steady_clock::time_point;

struct PublisherOptions {
  uint32_t rank = 0;
  size_t threads = 0;  // encode/write threads (0: hardware concurrency)
  // How long a publication waits for the group to commit older versions (0: twice the
  // config's ack timeout).
  std::chrono::milliseconds credit_timeout{0};
  ControlLog log;
  // The live paths to start (those the group's transports list); unset: default_live_paths().
  std::shared_ptr<const LivePathRegistry> live_paths;
  // Bytes of new values read per piece by a snapshot tensor not readable in place (strided
  // views, CUDA memory, FP8 values: publisher_staged.cc); at least one row (FP8: 128 rows).
  uint64_t staged_piece_bytes = uint64_t{32} << 20;
  // Tests: called on the worker after a version is written (and served) and before its
  // Offer is sent.
  std::function<void(uint64_t version)> before_offer;
  // Tests: called before every write of a delta part file; an error becomes the write's (an
  // injected ENOSPC).
  std::function<Status(const std::string& file, uint64_t bytes)> before_part_write;
};

class Publisher;

// The state of one publication, shared by the handle and the worker.
struct PublishJob {
  uint64_t version = 0;
  bool force_anchor = false;
  std::shared_ptr<PublishStep> step;  // hooked mode: the step whose writes make this version
  std::mutex mu;
  std::condition_variable cv;
  bool reads_done = false;
  bool done = false;
  Status status = ok_status();
  PublishReport report;
};

class PublishHandle {
 public:
  PublishHandle() = default;
  uint64_t version() const { return job_ ? job_->version : 0; }
  // The registered tensors have been read (or the publication failed before reading them).
  Status wait_for_reads(EndpointDeadline deadline) const;
  // Written to the journal and offered.
  Result<PublishReport> wait_published(EndpointDeadline deadline) const;
  // Committed by the group (every live subscriber acked it).
  Status wait_committed(EndpointDeadline deadline) const;

 private:
  friend class Publisher;
  PublishHandle(std::shared_ptr<PublishJob> job, Publisher* owner) : job_(job), owner_(owner) {}
  std::shared_ptr<PublishJob> job_;
  Publisher* owner_ = nullptr;
};

class Publisher {
 public:
  static Result<std::unique_ptr<Publisher>> start(const proto::GroupConfig& config,
                                                  PublisherOptions options);
  ~Publisher();

  // Before the first publish; names unique; host memory, or CUDA memory in builds with the
  // CUDA toolkit (transport/tensor_staging.h).
  // `updates`: how its new values reach the publisher (publish_step.h). Hooked tensors are
  // published only through steps; the others take the snapshot path in the same version.
  Status register_tensor(const TensorRef& ref, TensorUpdates updates = TensorUpdates::kSnapshot);

  // Snapshot mode: the registered tensors now hold `version`. Refused when a tensor is hooked.
  Result<PublishHandle> publish(uint64_t version, bool force_anchor = false);

  // Hooked mode (publish_step.h): opens the step whose writes make `version` (newer than
  // any published or queued one). Waits (up to the credit timeout) until the previous
  // publication has read the tensors, since the step's writes change them. One step at a time.
  Result<std::shared_ptr<PublishStep>> begin_step(uint64_t version, bool force_anchor = false);
  // Queues the step's version: the worker runs the guard, then publishes as publish() does.
  // wait_for_reads() returns once the guard and the anchor (if any) read the live tensors.
  Result<PublishHandle> publish_step(std::shared_ptr<PublishStep> step);

  std::optional<uint64_t> head() const;       // last version in the journal
  std::optional<uint64_t> committed() const;  // last version the group committed
  Status wait_committed(uint64_t version, EndpointDeadline deadline) const;
  // Whether versions are served on live path `path` ("ucx", "nccl": the group lists it and
  // it started here).
  bool serves(std::string_view path) const;
  // Tests: stops live path `path` as a dead one would (LivePathSide::shutdown); later offers
  // carry descriptors nothing answers.
  void close_live_path_for_test(std::string_view path);

  // Finishes queued publications, sends Leave and disconnects.
  void stop(const std::string& reason = "publisher stopping");

 private:
  Publisher(proto::GroupConfig config, PublisherOptions options);
  // Queues `job` on the executor and in queue_ (mu_ held, stopping_ false).
  Status enqueue(const std::shared_ptr<PublishJob>& job);
  // On the executor: runs `job`, the front of queue_, and ends its handle.
  void run_queued(const std::shared_ptr<PublishJob>& job);
  Status run_job(PublishJob& job);
  Status wait_for_credit(uint64_t version);
  Status rebuild_previous();
  Status allocate_snapshot(uint64_t version);
  // Serves and offers a written version (publisher_offer.cc).
  Status offer_version(PublishJob& job, PublishReport report,
                       std::chrono::steady_clock::time_point started, uint64_t started_unix);
  // A snapshot tensor not readable where it lives, read through staging into the snapshot
  // (publisher_staged.cc): its record when the snapshot held the head version.
  Status read_staged(size_t i, uint64_t version, bool from_snapshot,
                     std::optional<EncodedDelta>* record, bool* wide_changed);
  // The same for a tensor with a device snapshot: diffed on its GPU, then copied over it.
  Status read_device(size_t i, uint64_t version, bool from_snapshot,
                     std::optional<EncodedDelta>* record);
  // Hooked mode (publisher_step.cc). finish_step: the step's records (its encoder drained)
  // and whether they follow the journal's head. guard_live: the guard over the step's hooked
  // tensors on the GPU (`cuda`) or on the host, which must pass before the version commits;
  // on success the tensors' live checksums become the records' targets.
  Status finish_step(PublishJob& job, std::vector<std::optional<EncodedDelta>>* records,
                     bool* from_head);
  Status guard_live(PublishJob& job, const std::vector<std::optional<EncodedDelta>>& records,
                    bool cuda);
  // A refused step: the live tensors are in a state no record describes, so the next step
  // starts from their checksums (and, not following the head, is an anchor).
  Status refuse_step(const PublishJob& job, const Status& why);
  Result<uint64_t> live_checksum(size_t tensor) const;
  bool any_hooked() const;
  // FP8 groups (publisher_fp8.cc): registers the published pair of a selected tensor, whether
  // tensors_[i] is read where it lives (not FP8 values, host memory, contiguous), and
  // quantises rows [first_row, first_row + rows) (whole 128-row blocks but the last) of FP8
  // values tensor i's source into `out`, its block rows of the scale grid with them.
  // Hooked FP8 sources: the step's entry of FP8 values tensor i (its scales are tensor i + 1), C()
  // of the quantisation of its live source (values, scales; into `grid`, or the published scales
  // when null), and the guard comparing them with the records.
  Status register_fp8(const TensorRef& ref, TensorUpdates updates);
  bool read_in_place(size_t i) const;
  Status quantize_rows(size_t i, int64_t first_row, int64_t rows, std::span<uint8_t> out,
                       float* grid = nullptr);
  Result<PublishStep::Hooked> begin_hooked_fp8(size_t i, uint64_t version);
  Result<std::pair<uint64_t, uint64_t>> fp8_live_checksums(size_t i, float* grid);
  Status guard_fp8(const PublishJob& job, const PublishStep::Hooked& h,
                   const std::vector<std::optional<EncodedDelta>>& records);
  // A recorder of tensors_[tensor]'s delta to `version` from one whose C() is base_checksum.
  Result<std::unique_ptr<DeltaRecorder>> hooked_recorder(size_t tensor, uint64_t version,
                                                         uint64_t base_checksum) const;
  // Whether the step of `version` is an anchor whatever its writes (waits for the queued
  // publications first, as the journal's state decides it); opens its streamed anchor then.
  Status open_streamed_anchor(PublishStep& step, bool force_anchor);
  // Hooked anchor versions: the snapshot tensors' bytes into the streamed anchor, and the
  // hook that finishes it and moves its files into the journal's staged step.
  Status stream_snapshot_tensors(PublishStep& step, std::span<const PublishTensor> current,
                                 SnapshotAdvance* advance);
  void on_message(const proto::Envelope& message);

  proto::GroupConfig config_;
  PublisherOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<JournalWriter> writer_;
  std::unique_ptr<RankLink> link_;
  std::unique_ptr<GroupCredit> credit_;  // made by the constructor
  // After link_: a path's messages go out on the link. Set once in start().
  std::vector<std::unique_ptr<LivePathServer>> live_;

  std::vector<TensorRef> tensors_;
  // FP8 groups: the selection (unset: not an FP8 group), each selected tensor's source and
  // the index of its scales in tensors_ (pointing into scale_inv; its values, read only by
  // quantize_rows, come just before), and per entry of tensors_ the index of its source when
  // it is FP8 values (-1 otherwise; shorter than tensors_ until the first).
  struct Fp8Source {
    TensorRef source;
    size_t scale = 0;
    std::vector<float> scale_inv;
  };
  std::optional<Fp8Selection> fp8_;
  std::vector<Fp8Source> fp8_sources_;
  std::vector<int> fp8_of_;
  std::vector<TensorUpdates> updates_;  // per tensor
  // Hooked tensors: C() of their live bytes after the last step the guard passed (nullopt:
  // unknown, computed at the next begin_step). Worker-owned but read by begin_step under mu_.
  std::vector<std::optional<uint64_t>> live_checksums_;
  // The last step begun, and whether publish_step took it: one dropped unpublished may have
  // written the live tensors, so their checksums are then recomputed.
  std::weak_ptr<PublishStep> open_step_;
  bool open_step_queued_ = true;
  // previous_: the snapshot, the bytes of the last published version of the snapshot tensors,
  // advanced in place by each publication (SnapshotAdvance, or publisher_staged.cc for the
  // tensors read through staging_, a buffer of a bounded piece). Empty for hooked tensors.
  std::vector<std::vector<uint8_t>> previous_;
  std::vector<uint8_t> staging_;
  // `publisher.snapshot: device`: the snapshot of contiguous CUDA snapshot tensors of 1-, 2- or
  // 4-byte elements, in device memory (previous_[i] is then empty). Null for the others.
  std::vector<std::unique_ptr<DeviceSnapshot>> device_snapshots_;
  bool have_previous_ = false;
  bool first_job_ = true;  // the snapshot is built from the journal's head before first use

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  // The jobs queued on executor_ and not yet ended, in order (the front one is running).
  std::deque<std::shared_ptr<PublishJob>> queue_;
  std::optional<uint64_t> head_;
  uint64_t head_anchor_ = 0;  // the journal's latest anchor version (with head_)
  uint64_t last_queued_ = 0;
  bool any_queued_ = false;
  bool stopping_ = false;
  std::unique_ptr<SerialExecutor> executor_;  // made by start(); runs the queued jobs
};

}  // namespace weightcast
