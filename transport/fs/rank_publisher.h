// One publisher rank of a model that several ranks publish through one journal, each from the
// ranges it owns (an FSDP shard: flat ranges of tensors, possibly starting and ending
// mid-tensor), with no rank holding the model (docs/DECISIONS.md "Several publisher ranks").
//
//   RankPublisherOptions o;  o.root = "/shared/journal";  o.rank = r;  o.ranks = world;
//   auto p = RankPublisher::open(o, model_specs, my_ranges);   // every rank, same model_specs
//   for each step:  optimizer.step();  p->publish(version);     // every rank, same version
//
// The lead rank (0) holds the journal's writer and decides what each version is
// (rank_plan.h): an anchor at version 0, every anchor_every versions, when forced, or when its
// last version was not committed (a rank missing at its deadline, or a restart); a delta
// otherwise. It announces the decision in the version's fragments directory, and the other
// ranks follow it: an anchor's ranges are written into the staged shard files (rank_anchor.h),
// a delta's as range records against the rank's snapshot of its own ranges (rank_fragments.h).
// The lead writes its own part and commits once every rank's part is in place; the others
// return once their part is durable. A rank told to write a delta while it holds no snapshot
// of the version before (it restarted, or its last part was never committed) refuses by name,
// and the lead gives up on the version at once; its next version is an anchor, so the ranks
// resume with no message between them. Each rank's shares of the declared slices' checksums are
// computed from its ranges' bytes at an anchor and follow the encoder's changes at a delta
// (O(changed), slice_checksums.h SliceChangeSums).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "codec/formats/safetensors_format.h"
#include "codec/tensor_slice.h"
#include "transport/fs/journal_writer.h"
#include "transport/fs/rank_cells.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {

struct RankPublisherOptions {
  std::string root;
  uint32_t rank = 0;
  uint32_t ranks = 1;
  uint64_t anchor_every = 10;
  // How long rank 0 waits for the other ranks' parts, and the others for a staged anchor.
  std::chrono::milliseconds wait{60000};
  // Each owned range is published as pieces of at most this many elements, each a range record
  // of its own (0: one record per range), so that an engine rank whose slice meets part of a
  // long range reads only the pieces it needs.
  uint64_t piece_elements = uint64_t{1} << 21;
  // Serves each delta's parts on the rank's live paths before its part is put in place
  // (rank_fragments.h); the lead's commit report then lists every rank's descriptors
  // (PublishReport::rank_live_descriptors). Unset: the engines read the parts from the journal.
  ServeRankParts serve;
  // Rank 0's journal writer (its root is `root`); every rank plans anchors with its
  // anchor options and writes deltas with its part options, so give every rank the same.
  JournalOptions journal;
};

// Elements [first, first + count) of tensor `name` (of the model given to open), which this
// rank holds at `data`: `count` contiguous little-endian elements in host memory the trainer
// updates in place between publications. With `box` (a tensor-parallel rank's block,
// TensorSlice::box), the rank holds that block's elements instead, row-major within the block
// (a torch shard's own layout); `first` is unused and `count` its volume (0: taken from it).
struct OwnedRange {
  std::string name;
  uint64_t first = 0;
  uint64_t count = 0;
  const uint8_t* data = nullptr;
  std::optional<TensorSlice> box = std::nullopt;
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

  // Publishes `version` (newer than the last tried) from the ranges' bytes now: every rank
  // calls it with the same versions in the same order. `force_anchor` counts on the lead; the
  // others follow the lead's plan, waiting up to `wait` for it. Errors name the rank, the
  // version and the tensor; nothing of the version is committed then.
  Result<RankPublishReport> publish(uint64_t version, bool force_anchor = false);

  // Whether this rank holds the journal's writer and decides what each version is.
  bool lead() const { return writer_ != nullptr; }

  // The journal's writer (rank 0), else null.
  JournalWriter* writer() { return writer_.get(); }

 private:
  RankPublisher() = default;
  Result<RankPublishReport> publish_anchor(uint64_t version);
  Result<RankPublishReport> publish_delta(uint64_t version);
  std::string who(uint64_t version) const;
  // The journal's part options, keeping the parts in memory when they are served.
  DeltaPartOptions part_options() const;
  // Cell c's bytes now, contiguous (rank_cells.h cell_bytes; `scratch` holds a gathered one).
  std::span<const uint8_t> cell_now(size_t c, std::vector<uint8_t>* scratch) const;
  // Cell c's C() and shares of the declared slices, from `bytes` (its elements now).
  Status take_sums(size_t c, std::span<const uint8_t> bytes);
  // Adds the rank's share of each declared slice to `part`, summed over its cells per tensor.
  template <typename Part>
  void add_shares(Part* part) const;
  // A rank other than the lead that failed its part puts the reason where the lead waits.
  void refuse(uint64_t version, const Status& why) const;

  RankPublisherOptions options_;
  std::vector<SafetensorsTensorSpec> model_;
  // The ranges as pieces (an anchor writes each where it lies in the shard files), and per
  // piece its tensor's index in model_.
  std::vector<OwnedRange> ranges_;
  std::vector<size_t> tensor_of_;
  // The declared slices of each tensor the rank owns a range of (by index in model_).
  std::map<size_t, std::vector<TensorSlice>> declared_;
  // The pieces cut along the declared slices (rank_cells.h): a delta's records, one per cell,
  // each meeting one slice of every engine layout. Per cell: its piece, and at the last
  // version published its bytes (the rank's own shard, not the model), its C() and its share
  // of C() over each declared slice of its tensor.
  std::vector<RankCell> cells_;
  std::vector<size_t> cell_range_;
  size_t tensor_of_cell(size_t c) const { return tensor_of_[cell_range_[c]]; }
  const std::vector<TensorSlice>& slices_of(size_t c) const {
    return declared_.at(tensor_of_cell(c));
  }
  std::vector<std::vector<uint8_t>> snapshot_;
  std::vector<uint64_t> checksums_;
  std::vector<std::vector<uint64_t>> shares_;
  // Per cell, when it lies wholly inside or outside each declared slice: which hold it (its
  // shares are then its C() or 0, no change tracked); nullopt when one holds part of it.
  std::vector<std::optional<std::vector<bool>>> held_by_;
  std::unique_ptr<JournalWriter> writer_;
  std::optional<uint64_t> last_;    // the version the snapshot holds, when it is whole
  std::optional<uint64_t> newest_;  // the last version tried
};

}  // namespace weightcast
