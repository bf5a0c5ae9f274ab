// One publisher rank of a model that several ranks publish through one journal, each from the
// ranges it owns (an FSDP shard: flat ranges of tensors, possibly starting and ending
// mid-tensor), with no rank holding the model (docs/DECISIONS.md "Several publisher ranks").
//
//   RankPublisherOptions o;  o.root = "/shared/journal";  o.rank = r;  o.ranks = world;
//   auto p = RankPublisher::open(o, model_specs, my_ranges);   // every rank, same model_specs
//   for each step:  optimizer.step();  p->publish(version);     // every rank, same version
//
// Every rank decides alike whether a version is an anchor (version 0, every anchor_every
// versions, or force_anchor): an anchor's ranges are written into the staged
// shard files (rank_anchor.h), a delta's as range records against the rank's snapshot of its
// own ranges (rank_fragments.h). Rank 0 holds the journal's writer: it stages anchors for the
// others, writes its own part and commits once every rank's part is in place; the others
// return once their part is durable. A rank that restarts has no snapshot, and a version that
// was not committed (a rank missing at rank 0's deadline) leaves the others' snapshots ahead of
// the journal: the next version must then be an anchor (force_anchor on every rank); a delta
// is refused by name; so is one after this rank's own delta failed part way. The ranks' shares of
// the declared slices' checksums are computed from their ranges' bytes at every version (a pass
// over the rank's own shard).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "codec/formats/safetensors_format.h"
#include "transport/fs/journal_writer.h"

namespace weightcast {

struct RankPublisherOptions {
  std::string root;
  uint32_t rank = 0;
  uint32_t ranks = 1;
  uint64_t anchor_every = 10;
  // How long rank 0 waits for the other ranks' parts, and the others for a staged anchor.
  std::chrono::milliseconds wait{60000};
  // Rank 0's journal writer (its root is `root`); every rank plans anchors with its
  // anchor options and writes deltas with its part options, so give every rank the same.
  JournalOptions journal;
};

// Elements [first, first + count) of tensor `name` (of the model given to open), which this
// rank holds at `data`: `count` contiguous little-endian elements in host memory the trainer
// updates in place between publications.
struct OwnedRange {
  std::string name;
  uint64_t first = 0;
  uint64_t count = 0;
  const uint8_t* data = nullptr;
};

struct RankPublishReport {
  uint64_t version = 0;
  bool anchor = false;
  uint64_t stored_bytes = 0;            // this rank's part: record bytes (delta) or tensor bytes
  std::optional<PublishReport> commit;  // rank 0: the journal writer's report
};

class RankPublisher {
 public:
  // `model`: every tensor of the model, in the same order on every rank. `ranges`: this rank's;
  // each inside its tensor (refused by name). Rank 0 opens the journal's writer.
  static Result<std::unique_ptr<RankPublisher>> open(RankPublisherOptions options,
                                                     std::vector<SafetensorsTensorSpec> model,
                                                     std::vector<OwnedRange> ranges);

  // Publishes `version` (newer than the last) from the ranges' bytes now. Errors name the
  // rank, the version and the tensor; nothing of the version is committed then.
  Result<RankPublishReport> publish(uint64_t version, bool force_anchor = false);

  // The journal's writer (rank 0), else null.
  JournalWriter* writer() { return writer_.get(); }

 private:
  RankPublisher() = default;
  Result<RankPublishReport> publish_anchor(uint64_t version);
  Result<RankPublishReport> publish_delta(uint64_t version);
  std::string who(uint64_t version) const;

  RankPublisherOptions options_;
  std::vector<SafetensorsTensorSpec> model_;
  std::vector<OwnedRange> ranges_;
  std::vector<size_t> tensor_of_;  // per range, its tensor's index in model_
  std::unique_ptr<JournalWriter> writer_;
  // The bytes of every range at the last version published (the rank's own shard, not the
  // model), and C() of each range then.
  std::vector<std::vector<uint8_t>> snapshot_;
  std::vector<uint64_t> checksums_;
  std::optional<uint64_t> last_;
};

}  // namespace weightcast
