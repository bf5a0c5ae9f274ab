// The NCCL half of the nccl live path (src/endpoint/nccl_live_path.h): inside a fabric, the
// publisher broadcasts each version's delta to the subscribers of the membership epoch in
// force, on that epoch's communicator, instead of each subscriber reading the journal or UCX.
//
// One NcclLive per rank runs the rank's part of the epoch protocol (control.proto NcclEpoch,
// src/control/nccl_epochs.h) on its own thread, in the order the coordinator's messages came:
//   make_id (NCCL rank 0)  -> BroadcastGroupFactory::make_id, reported with the id;
//   join                   -> BroadcastGroupFactory::join within nccl.timeout_ms, reported;
//   ready                  -> the publisher's next served versions name the epoch;
//   end                    -> the group is aborted at once (also a round waiting in it).
// A version's round (transport/nccl/broadcast_round.h) carries what every live path serves:
// a "MANIFEST" part (the framed delta manifest) and the manifest's part files. The publisher
// enters a version's round when it serves it; a subscriber enters it when the coordinator's
// offer names the epoch (every subscriber of the epoch does, even one that will not apply it:
// a collective waits for all its members). Every round has the nccl.timeout_ms deadline; a
// failed round is reported (NCCL_ROUND), the coordinator ends the epoch, and a subscriber
// nacks the version and recovers through the journal. The collective is a
// BroadcastGroupFactory: NCCL on a GPU host (make_nccl_groups), the loopback group in CPU
// tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "codec/base/serial_executor.h"
#include "codec/base/status.h"
#include "src/endpoint/live_path.h"  // FetchedDelta
#include "transport/fs/journal_writer.h"
#include "transport/nccl/broadcast_group.h"
#include "weightcast/control.pb.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

// The NCCL groups of this build and host: NCCL on CUDA device `device` with the config's
// bucket size and buffers, after setting the config's nccl.env. kFailedPrecondition (saying
// why) without a usable GPU, without NCCL, or in a build without them.
Result<std::unique_ptr<nccl::BroadcastGroupFactory>> make_nccl_groups(
    const proto::NcclConfig& config, int device = 0);

// The config's nccl.timeout_ms, or its default when unset.
std::chrono::milliseconds nccl_timeout(const proto::NcclConfig& config);

struct NcclLiveOptions {
  uint32_t rank = 0;
  std::chrono::milliseconds timeout{60000};   // a join, a round
  std::function<void(proto::Envelope)> send;  // to the coordinator (RankLink::send)
  std::function<void(const std::string&)> log;
};

class NcclLive {
 public:
  NcclLive(std::unique_ptr<nccl::BroadcastGroupFactory> groups, NcclLiveOptions options);
  ~NcclLive();  // aborts the group in force and joins the thread
  NcclLive(const NcclLive&) = delete;
  NcclLive& operator=(const NcclLive&) = delete;

  std::string describe() const;

  // Aborts the group in force and ends every wait (take_received returns an error); the
  // thread stops. The owner calls it before joining threads that may wait here.
  void shutdown();

  // A stage from the coordinator; any thread (the rank link's). End aborts the group at once.
  void on_epoch(const proto::NcclEpoch& message);

  // Publisher: the epoch its next offer is broadcast in (0: none ready).
  uint64_t ready_epoch() const;
  // Publisher: queues version `version`'s round in `epoch` (`delta` null: a round without
  // parts, so subscribers read the journal).
  void send_version(uint64_t epoch, uint64_t version, std::shared_ptr<const DeltaInMemory> delta);

  // Subscriber: queues taking part in version `version`'s round in `epoch` (an offer said so).
  void receive_version(uint64_t epoch, uint64_t version);
  // Subscriber: the delta of `version` as its round delivered it, waiting for the round up to
  // `deadline`. nullopt when no round was queued for it, or its round carried no parts (read
  // the journal); an error when the round failed or the delta did not verify.
  std::optional<Result<FetchedDelta>> take_received(uint64_t version,
                                                    std::chrono::steady_clock::time_point deadline);
  // Subscriber: forgets received rounds up to `version` (a recovery goes by the journal).
  void forget_through(uint64_t version);

 private:
  struct Task {
    enum class Kind { kStage, kSend, kReceive } kind = Kind::kStage;
    proto::NcclEpoch stage;
    uint64_t epoch = 0;
    uint64_t version = 0;
    std::shared_ptr<const DeltaInMemory> delta;
  };
  // Queues `t` on the executor (mu_ held by the callers); run() is the task.
  void post(Task t);
  void run(const Task& t);
  void run_stage(const proto::NcclEpoch& m);
  void run_send(const Task& t);
  void run_receive(const Task& t);
  void report(uint64_t epoch, proto::NcclStage stage, const Status& outcome,
              const std::string& group_id = "", uint64_t version = 0);
  void drop_group(const std::string& why);

  std::unique_ptr<nccl::BroadcastGroupFactory> groups_;
  NcclLiveOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t ready_epoch_ = 0;
  // The epoch whose group this rank holds (the thread's; read by abort under mu_).
  uint64_t group_epoch_ = 0;
  std::shared_ptr<nccl::BroadcastGroup> group_;
  // Subscriber: rounds queued (nullopt) or done, by version.
  std::map<uint64_t, std::optional<Result<std::optional<FetchedDelta>>>> received_;
  // Last: its thread starts once the rest exists. Runs the stages, sends and receives in the
  // order they came; the group's calls all happen there, one at a time.
  SerialExecutor executor_{SerialExecutor::OnStop::kDropQueued};
};

}  // namespace weightcast
