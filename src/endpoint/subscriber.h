// The subscriber endpoint an inference engine embeds: register the engine's
// tensors (whole, shards, strided views of packed parameters), connect, and versions arrive.
//
// For every Offer (and every Recover, and a Welcome naming a newer head) a worker brings a
// staging copy of the tensors to the target through the journal (delta from the version
// held, or anchor + deltas; every part's XXH3 and every tensor's checksum verified), then
// calls before_apply(v), copies the tensors that changed into the engine's memory, calls
// after_apply(v) and acks v with every checksum. The engine's tensors are only ever written
// from a verified staging copy, so they hold the last verified version or the new one and
// never anything in between (invariant 1); a failure is nacked and the engine keeps its
// version until a Recover succeeds. Failed attempts back off (0.25 s doubling to 4 s). The one
// exception: a copy into the engine's memory that fails itself (a CUDA error) can leave that
// tensor partly written; it is nacked and written again by the next attempt.
//
// When the coordinator chose ucx for this rank and the Offers of every version from the held
// one to the target carry a UCX blob, the deltas are read from the publisher's memory over
// UCX (src/endpoint/ucx_live.h) instead of the journal, with the same checks; a UCX failure
// is nacked and the recovery that follows reads the journal. Likewise, versions whose Offers
// name an NCCL epoch arrive by its broadcast (src/endpoint/nccl_live.h), verified the same way.
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
#include <thread>
#include <vector>

#include "codec/status.h"
#include "codec/tensor_ref.h"
#include "codec/thread_pool.h"
#include "src/control/rate_limited_log.h"
#include "src/endpoint/nccl_live.h"
#include "src/endpoint/publisher.h"
#include "src/endpoint/rank_link.h"
#include "src/endpoint/ucx_live.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

class CatchUpReader;

struct SubscriberOptions {
  uint32_t rank = 0;
  size_t threads = 0;  // apply threads (0: hardware concurrency)
  ControlLog log;
  // Around the copy into the engine's tensors, on the subscriber's worker thread.
  std::function<void(uint64_t version)> before_apply;
  std::function<void(uint64_t version)> after_apply;
  // The NCCL groups when the group lists nccl (unset: make_nccl_groups; tests: loopback).
  NcclGroupsMaker nccl_groups;
};

struct SubscriberStats {
  uint64_t versions_applied = 0;
  uint64_t nacks = 0;
  uint64_t anchors_loaded = 0;
  uint64_t last_apply_us = 0;
  uint64_t versions_over_ucx = 0;   // applied from deltas read over UCX
  uint64_t versions_over_nccl = 0;  // applied from deltas broadcast over NCCL
  std::string last_transport;       // how the last applied version arrived: nccl, ucx or fs
};

class Subscriber {
 public:
  static Result<std::unique_ptr<Subscriber>> create(const proto::GroupConfig& config,
                                                    SubscriberOptions options);
  ~Subscriber();

  // Before connect(); names unique; host memory, or CUDA memory in builds with the CUDA
  // toolkit (src/endpoint/tensor_staging.h).
  Status register_tensor(const TensorRef& destination);
  // For a rank without an engine (weightcastd): waits for the journal's HEAD, then allocates
  // and registers a tensor for each of the head's tensors. While it waits it says why at a
  // bounded rate (no directory, nothing published, an unreadable HEAD); `cancelled` (checked
  // every 100 ms) ends the wait early with kFailedPrecondition.
  Status register_from_journal(EndpointDeadline deadline,
                               const std::function<bool()>& cancelled = {});

  // Starts the worker and says Hello to the coordinator.
  Status connect();

  std::optional<uint64_t> current_version() const;
  Status wait_for_version(uint64_t version, EndpointDeadline deadline) const;
  SubscriberStats stats() const;
  std::optional<std::string> fatal_error() const;
  // C() of registered tensor i at current_version().
  uint64_t checksum(size_t i) const;
  const std::vector<TensorRef>& tensors() const { return tensors_; }

  // Lets an apply in progress finish (it is then acked), sends Leave, disconnects.
  void stop(const std::string& reason = "subscriber stopping");

 private:
  Subscriber(proto::GroupConfig config, SubscriberOptions options);
  void on_message(const proto::Envelope& message);
  void worker();
  void attempt(uint64_t target);
  // nullopt: the UCX path does not apply (not chosen, a blob missing); else its outcome.
  std::optional<Status> apply_over_ucx(uint64_t target, uint64_t* bytes_read);
  // nullopt: no NCCL round carried the next version; else its outcome (a later version
  // without a round is read from the journal).
  std::optional<Status> apply_over_nccl(uint64_t target, uint64_t* bytes_read);

  proto::GroupConfig config_;
  SubscriberOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<TensorRef> tensors_;
  std::vector<std::vector<uint8_t>> owned_;    // register_from_journal's tensors
  std::vector<std::vector<uint8_t>> staging_;  // what the journal reader writes
  std::vector<std::optional<uint64_t>> live_checksums_;
  std::unique_ptr<CatchUpReader> reader_;
  std::unique_ptr<RankLink> link_;
  std::unique_ptr<UcxLiveFetcher> ucx_;
  std::unique_ptr<NcclLive> nccl_;
  // Nacks and recovers repeat while a fault lasts: their lines are rate-limited.
  std::unique_ptr<RateLimitedLog> nack_log_;
  std::unique_ptr<RateLimitedLog> recover_log_;

  mutable std::mutex mu_;
  std::string transport_;                      // chosen by the coordinator (Welcome)
  std::map<uint64_t, std::string> ucx_blobs_;  // Offers' UCX blobs by version
  mutable std::condition_variable cv_;
  std::optional<uint64_t> target_;
  bool retry_requested_ = false;
  std::optional<uint64_t> current_;
  std::string current_journal_;      // the journal current_ belongs to (JournalHead.journal_id)
  bool reload_from_anchor_ = false;  // the next attempt drops the held version first
  // Recovers in quick succession push the next attempt back (0.25 s doubling to 4 s).
  uint64_t recent_recovers_ = 0;
  std::chrono::steady_clock::time_point last_recover_{};
  std::chrono::steady_clock::time_point recover_not_before_{};
  std::vector<uint64_t> current_checksums_;
  SubscriberStats stats_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace weightcast
