// The subscriber endpoint an inference engine embeds: register the engine's
// tensors (whole, or strided views of packed parameters; host or CUDA memory), connect, and
// versions arrive.
//
// For every Offer (and every Recover, and a Welcome naming a newer head) a worker brings the
// engine's tensors to the target in place (transport/fs/catch_up_reader.h): a delta's records
// are applied straight into the engine's memory, an anchor is read into it; only record bytes
// are staged, and they are checked (part XXH3s, manifest, record headers) before the first
// write. A version is all or nothing: when a tensor fails once writes began (a target
// mismatch, a corrupt chunk, a CUDA error) the tensors already applied in that version are
// reverted and verified, the version is nacked and recovery follows. before_apply(v) and
// after_apply(held) bracket the only window in which the engine's memory differs from a
// verified version (an engine pauses generation there); after_apply names the version held
// when the window closes (v, or the previous one after a revert), and is deferred while no
// version is held (an anchor that failed while loading) so that a paused engine stays paused.
// Each acked version carries every checksum. Failed attempts back off (0.25 s doubling to 4 s).
//
// An engine that loaded its weights itself (as vLLM does at start) sets claimed_version: the
// subscriber verifies every tensor's checksum against that version's manifest and, on a
// mismatch, loads an anchor in place instead of trusting the claim.
//
// Live paths (src/endpoint/live_path.h: ucx, nccl): when the Offers of the versions after the
// held one carry descriptors of paths this rank runs, each version's delta is fetched over
// the first such path in the Welcome's order instead of being read from the journal, and
// applied with the journal's checks (CatchUpReader::apply_delta_from). A version no live
// path carries, and every later one, is read from the journal; a live path's failure is
// nacked and the recovery that follows reads the journal.
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
#include <utility>
#include <vector>

#include "codec/base/status.h"
#include "codec/base/thread_pool.h"
#include "codec/delta_apply.h"
#include "codec/tensor_ref.h"
#include "src/control/layouts.h"
#include "src/control/rate_limited_log.h"
#include "src/endpoint/live_path.h"
#include "src/endpoint/publisher.h"
#include "src/endpoint/rank_link.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

class CatchUpReader;

struct SubscriberOptions {
  uint32_t rank = 0;
  size_t threads = 0;  // apply threads (0: hardware concurrency)
  ControlLog log;
  // Around every write into the engine's tensors, on the subscriber's worker thread (see
  // above): before_apply(version being written), after_apply(version held now).
  std::function<void(uint64_t version)> before_apply;
  std::function<void(uint64_t held)> after_apply;
  // The version the engine's tensors hold already at connect() (loaded by the engine itself);
  // verified by checksum before it is trusted.
  std::optional<uint64_t> claimed_version;
  // The live paths to start (those the group's transports list); unset: default_live_paths().
  std::shared_ptr<const LivePathRegistry> live_paths;
};

struct SubscriberStats {
  uint64_t versions_applied = 0;
  uint64_t nacks = 0;
  uint64_t anchors_loaded = 0;
  uint64_t last_apply_us = 0;
  // Versions applied, by how they arrived: a live path's name, or "fs" (the journal).
  std::map<std::string, uint64_t> versions_by_path;
  std::string last_transport;       // how the last applied version arrived: nccl, ucx or fs
  uint64_t last_bytes_written = 0;  // into the engine's memory by the last attempt
  uint64_t bytes_written = 0;       // into the engine's memory in all (reverts included)
  bool claim_verified = false;      // claimed_version matched the journal's checksums
};

class Subscriber {
 public:
  static Result<std::unique_ptr<Subscriber>> create(const proto::GroupConfig& config,
                                                    SubscriberOptions options);
  ~Subscriber();

  // Before connect(); names unique; host memory, or CUDA memory in builds with the CUDA
  // toolkit (transport/tensor_staging.h). On a rank whose config names a layout, only tensors
  // that layout holds whole (register_slice takes the others).
  Status register_tensor(const TensorRef& destination);
  // A rank whose group config names a layout (docs/CONFIG.md `layouts`) holds, of each tensor
  // the layout splits, the slice its part cuts (slice_of): `destination` holds that slice's
  // elements in its local order (codec/tensor_slice.h; host memory) and `global_shape` is the
  // tensor's. The rank then reads, applies and verifies only that slice, against the slice
  // checksums of the journal's manifests, and acks the slice's checksum. Errors name the
  // tensor, the slice and the sizes.
  Status register_slice(const TensorRef& destination, const std::vector<int64_t>& global_shape);
  // The slice of tensor `name` (global `shape`) this rank holds: the whole tensor on a rank
  // without a layout.
  Result<TensorSlice> slice_of(const std::string& name, const std::vector<int64_t>& shape) const;
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
  // The newest version the coordinator told this rank is committed: the group's, or for a
  // rank of an engine replica its replica's, committed once every part of the replica acked
  // it (docs/DECISIONS.md "A replica is committed on its own"). What an engine may serve.
  std::optional<uint64_t> committed_version() const;
  Status wait_committed(uint64_t version, EndpointDeadline deadline) const;
  SubscriberStats stats() const;
  std::optional<std::string> fatal_error() const;
  // C() of registered tensor i at current_version().
  uint64_t checksum(size_t i) const;
  const std::vector<TensorRef>& tensors() const { return tensors_; }

  // Lets an apply in progress finish (it is then acked), sends Leave, disconnects.
  void stop(const std::string& reason = "subscriber stopping");

 private:
  Subscriber(proto::GroupConfig config, SubscriberOptions options);
  // Registration's common part: a stageable destination, before connect(), a new name.
  Status add_destination(const TensorRef& destination, std::optional<SliceDestination> slice);
  void on_message(const proto::Envelope& message);
  // Until `which` (current_ or committed_, read under mu_) reaches `version`; `what` names it.
  Status wait_until(const std::optional<uint64_t>& which, uint64_t version,
                    EndpointDeadline deadline, const char* what) const;
  void worker();
  void attempt(uint64_t target);
  // Verifies claimed_version against the journal (on the worker, before its first attempt).
  void check_claim();
  // The live paths (subscriber_live.cc). start_live_paths: at connect(), adds the paths
  // this host can use to the Hello. note_live_message: every message first (without mu_);
  // true when it was only for a live path. apply_over_live_paths: nullopt when no live path
  // carries the versions up to `target`, else its outcome; `how` names the path.
  void start_live_paths(RankLinkOptions* link);
  bool note_live_message(const proto::Envelope& message);
  std::optional<Status> apply_over_live_paths(uint64_t target, uint64_t* bytes_read,
                                              std::string* how);
  void forget_live_through(uint64_t version);
  void stop_live_paths();
  // The paths whose descriptors `version`'s Offer carried, in the Welcome's order.
  std::vector<std::pair<LivePathFetcher*, std::string>> live_carriers(uint64_t version);
  // Per publisher rank that served its parts of a version on a path: its shard, its descriptor.
  using ShardList = std::vector<std::pair<uint32_t, std::string>>;
  std::vector<std::pair<LivePathFetcher*, ShardList>> live_rank_carriers(uint64_t version);
  // A version several publisher ranks wrote, its records read from the ranks that serve them
  // (the rest from the journal); nullopt when no live path carries its rank parts.
  std::optional<Status> apply_rank_parts(uint64_t version,
                                         std::chrono::steady_clock::time_point deadline,
                                         uint64_t* bytes_read, std::string* how);

  proto::GroupConfig config_;
  SubscriberOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<TensorRef> tensors_;
  std::vector<std::optional<SliceDestination>> slices_;  // tensors_[i]'s slice, if not whole
  const proto::RankConfig* rank_config_ = nullptr;       // in config_
  std::optional<LayoutRules> layout_rules_;              // when the rank names a layout
  std::vector<std::vector<uint8_t>> owned_;              // register_from_journal's tensors
  uint64_t engine_bytes_ = 0;                            // of the registered tensors
  bool claim_pending_ = false;  // claimed_version not yet checked (worker only)
  std::unique_ptr<CatchUpReader> reader_;
  std::unique_ptr<RankLink> link_;
  // After link_: a path's messages go out on the link. Set once in connect().
  std::vector<std::unique_ptr<LivePathFetcher>> live_;
  // Nacks and recovers repeat while a fault lasts: their lines are rate-limited.
  std::unique_ptr<RateLimitedLog> nack_log_;
  std::unique_ptr<RateLimitedLog> recover_log_;

  mutable std::mutex mu_;
  std::vector<std::string> live_order_;  // Welcome.transports: the order paths are tried in
  // The Offers' live descriptors, by version then path name (the last few versions).
  std::map<uint64_t, std::map<std::string, std::string>> live_descriptors_;
  // The Offers' shard descriptors, by version then path name.
  std::map<uint64_t, std::map<std::string, ShardList>> live_shards_;
  mutable std::condition_variable cv_;
  std::optional<uint64_t> target_;
  bool retry_requested_ = false;
  std::optional<uint64_t> current_;
  std::optional<uint64_t> committed_;  // Commit messages (committed_version)
  std::string current_journal_;        // the journal current_ belongs to (JournalHead.journal_id)
  bool reload_from_anchor_ = false;    // the next attempt drops the held version first
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
