// The publisher endpoint of one trainer rank when several ranks publish the model together,
// each from the shard it owns (docs/DECISIONS.md "Several publisher ranks"): no rank gathers
// the model. The group config's publisher ranks, in rank order, are the shards 0..P-1; shard 0
// is the lead, which holds the journal's writer, decides whether each version is a delta or an
// anchor, commits it once every shard's part is durable, and offers it to the coordinator (every
// tensor's checksum and the manifest's slice checksums come from the journal). Every shard says
// Hello as a publisher rank, so the group's status lists it and it learns of commits.
//
//   ShardPublisherOptions o;  o.rank = my_group_rank;
//   auto p = ShardPublisher::start(config, o, model_specs, my_ranges);   //
//   transport/fs/rank_publisher.h for each step:  optimizer.step();  p->publish(version); // every
//   shard, same versions
//
// On the group's live paths that carry rank parts (ucx), each shard serves its own parts of every
// delta from its memory; the lead's Offer carries every shard's descriptors, and each engine
// rank reads the records it needs straight from the shards that own them.
//
// publish() returns once this shard's part is durable (the lead: once the version is committed
// to the journal and offered). The lead first waits until fewer than max_in_flight offered
// versions are uncommitted (the group's back-pressure); the other shards wait for the lead's plan
// of the version, so they follow its pace. A shard that fails or dies leaves the version
// uncommitted and invisible (the lead names it); the lead's next version is then an anchor,
// which every shard writes, so the group goes on once the shard is back.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/base/thread_pool.h"
#include "src/control/zmq_channel.h"
#include "src/endpoint/group_credit.h"
#include "src/endpoint/live_path.h"
#include "src/endpoint/rank_link.h"
#include "transport/fs/rank_publisher.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

struct ShardPublisherOptions {
  uint32_t rank = 0;   // this process's rank in the group config: one of its publisher ranks
  size_t threads = 0;  // encode threads (0: hardware concurrency)
  ControlLog log;
  // How long the lead waits for the other shards' parts, and they for its plan (0: the
  // config's ack timeout).
  std::chrono::milliseconds parts_wait{0};
  // How long the lead waits for the group to commit older versions (0: twice the ack timeout).
  std::chrono::milliseconds credit_timeout{0};
  // The live paths to serve this shard's parts on: those of the group's transports that carry
  // rank parts (LivePath::carries_rank_parts); unset: default_live_paths().
  std::shared_ptr<const LivePathRegistry> live_paths;
};

// The config's publisher ranks in rank order: shard k is the k-th. Refused by name when `rank`
// is not one of them, or the config enables FP8 (published by one publisher rank).
struct ShardPlace {
  uint32_t shard = 0;
  uint32_t shards = 1;
};
Result<ShardPlace> shard_place(const proto::GroupConfig& config, uint32_t rank);

class ShardPublisher {
 public:
  // `model`: every tensor of the model, in the same order on every shard; `ranges`: the
  // elements this shard owns (transport/fs/rank_publisher.h OwnedRange), in memory the trainer
  // updates in place between publications.
  static Result<std::unique_ptr<ShardPublisher>> start(const proto::GroupConfig& config,
                                                       ShardPublisherOptions options,
                                                       std::vector<SafetensorsTensorSpec> model,
                                                       std::vector<OwnedRange> ranges);
  ~ShardPublisher();

  uint32_t shard() const { return place_.shard; }
  uint32_t shards() const { return place_.shards; }
  bool lead() const { return place_.shard == 0; }

  // Publishes `version` from the ranges' bytes now (every shard, the same versions in the same
  // order). The trainer may change its weights once it returns. Errors name the shard, the
  // version and the rank or tensor at fault; nothing of the version is committed then.
  Result<RankPublishReport> publish(uint64_t version, bool force_anchor = false);

  std::optional<uint64_t> committed() const;  // the last version the group committed
  // Committed by the group (every live subscriber acked it), on any shard.
  Status wait_committed(uint64_t version, std::chrono::steady_clock::time_point deadline) const;

  // Sends Leave and disconnects.
  void stop(const std::string& reason = "publisher stopping");

 private:
  ShardPublisher(proto::GroupConfig config, ShardPublisherOptions options, ShardPlace place);
  void offer(const RankPublishReport& report, std::chrono::steady_clock::time_point started,
             uint64_t started_unix);
  // Starts the live paths that carry rank parts (the group's transports that can run here).
  void start_live_paths();
  // Serves this shard's parts of `version` on them: path name -> descriptor.
  std::map<std::string, std::string> serve(uint64_t version,
                                           std::shared_ptr<const DeltaInMemory> delta);

  proto::GroupConfig config_;
  ShardPublisherOptions options_;
  ShardPlace place_;
  uint64_t shard_bytes_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  // Declared before publisher_, whose parts they may serve: destroyed after it.
  std::vector<std::unique_ptr<LivePathServer>> live_;
  std::unique_ptr<RankPublisher> publisher_;
  std::unique_ptr<RankLink> link_;

  std::unique_ptr<GroupCredit> credit_;  // made by the constructor; the lead's offers hold credit
  mutable std::mutex mu_;
  std::optional<uint64_t> published_;  // this shard's last durable part
  bool stopping_ = false;
};

}  // namespace weightcast
