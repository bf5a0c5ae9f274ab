// The publisher of one trainer rank when several ranks publish the model together, each from
// the shard it owns (an FSDP rank's flat ranges, which may start and end mid-tensor): no rank
// gathers the model. The group config's publisher ranks, in rank order, are the shards; the
// first is the lead, which commits each version once every shard's part is durable and offers
// it to the group (docs/DECISIONS.md "Several publisher ranks").
//
//   std::vector<weightcast::api::TensorSpec> model = ...;   // every tensor, same on every rank
//   std::vector<weightcast::api::ShardRange> mine = ...;    // this rank's elements
//   auto p = weightcast::api::ShardPublisher::start("group.yaml", rank, model, mine);
//   for each step:  optimizer.step();  p->publish(v);        // every rank, the same versions
//
// publish() returns once this rank's part of the version is durable (the lead: once the version
// is committed to the journal and offered); the trainer may then change its weights. A rank that
// fails or dies leaves the version uncommitted everywhere; the lead's next version is then an
// anchor, which every rank writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightcast/deadline.h"
#include "weightcast/status.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

struct ShardPublisherOptions {
  size_t threads = 0;  // encode threads (0: the hardware's concurrency)
  // How long the lead waits for the other ranks' parts, and they for its plan (0: the config's
  // ack timeout).
  std::chrono::milliseconds parts_wait{0};
  // How long the lead waits for the group to commit older versions (0: twice the ack timeout).
  std::chrono::milliseconds credit_timeout{0};
  LogCallback log;
};

// One tensor of the model as the engines see it: its global shape.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
};

// Elements [first, first + data.numel()) of tensor `name` in row-major order, held by this rank
// at `data`: contiguous host memory of the tensor's dtype that the trainer updates in place.
// With `offsets` (one per dimension of the tensor), the rank holds instead the block of
// data.shape at those offsets (a tensor-parallel shard: columns [c, c + n) of a [rows, cols]
// weight are offsets {0, c} and data of shape {rows, n}); `first` is then unused.
struct ShardRange {
  std::string name;
  uint64_t first = 0;
  TensorRef data;
  std::vector<int64_t> offsets = {};  // (= {}: {name, first, data} stays warning-free)
};

struct ShardPublishReport {
  uint64_t version = 0;
  bool anchor = false;
  uint64_t stored_bytes = 0;    // this rank's part: record bytes (delta) or tensor bytes (anchor)
  bool committed_here = false;  // the lead committed the version (its other fields are this part's)
};

class ShardPublisher {
 public:
  // Loads the group config (docs/CONFIG.md) at `config_path`, checks that `rank` is one of its
  // publisher ranks and every range lies inside its tensor (refused by name), opens the journal
  // (the lead) and connects to the coordinator in the background.
  static Result<std::unique_ptr<ShardPublisher>> start(const std::string& config_path,
                                                       uint32_t rank, std::vector<TensorSpec> model,
                                                       std::vector<ShardRange> ranges,
                                                       ShardPublisherOptions options = {});
  ShardPublisher(const ShardPublisher&) = delete;
  ShardPublisher& operator=(const ShardPublisher&) = delete;
  ~ShardPublisher();  // stop()

  uint32_t shard() const;   // this rank's place among the publisher ranks
  uint32_t shards() const;  // how many publisher ranks there are
  bool lead() const;

  // Publishes `version` from the ranges' bytes now. Errors name the rank, the version and the
  // rank or tensor at fault; nothing of the version is committed then.
  Result<ShardPublishReport> publish(uint64_t version, bool force_anchor = false);

  std::optional<uint64_t> committed() const;  // the last version the group committed
  Status wait_committed(uint64_t version, Deadline deadline) const;

  // Leaves the group and disconnects. Idempotent.
  void stop(const std::string& reason = "publisher stopping");

 private:
  struct Impl;
  explicit ShardPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast::api
