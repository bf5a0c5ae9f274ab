// Several publisher ranks writing one delta version of a journal (docs/DECISIONS.md "Several
// publisher ranks"). Each rank encodes the ranges of the tensors it owns (range records,
// global element indices) and writes them into a fragment of its own under the root's
// staging directory:
//
//   .staging/<step>.ranks/rank-<r>/FRAGMENT          the rank's ranges (a framed StepManifest)
//   .staging/<step>.ranks/rank-<r>/r<r>-part-<k>.wcd  its records
//
// A fragment is durable once its directory has its final name (written as rank-<r>.tmp,
// fsynced, renamed). The journal's one writer (JournalWriter::publish_rank_fragments) waits
// for every rank's fragment, checks that the ranges of all ranks tile every tensor of the head
// version exactly and start from it, moves the parts into one step and commits that step, so
// HEAD moves once. A rank that fails or dies before its fragment is in place leaves the version
// uncommitted: the writer gives up at its deadline, names the missing ranks and removes the
// fragments; the version is published again once the rank is back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_encoder.h"
#include "codec/tensor_slice.h"
#include "transport/fs/delta_step.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// Where rank fragments of `version` lie, and rank `rank`'s fragment directory in it.
std::string rank_fragments_dir(const JournalLayout& layout, uint64_t version);
std::string rank_fragment_dir(const JournalLayout& layout, uint64_t version, uint32_t rank);

// The name rank `rank`'s part file `file` (as its fragment names it) takes in the committed step.
std::string merged_part_file(uint32_t rank, const std::string& file);

// Serves a rank's parts of delta `version` on its live paths (src/endpoint/shard_publisher.h):
// `delta` holds its fragment, whose parts are named as the committed step names them
// (merged_part_file), and their stored bytes. Returns live path name -> descriptor for the
// paths that serve them (a path that failed is left out: the engines read those parts from the
// journal).
using ServeRankParts = std::function<std::map<std::string, std::string>(
    uint64_t version, std::shared_ptr<const DeltaInMemory> delta)>;

// Lists a rank's share of C() over `slice` of `tensor` in its fragment (the writer adds up the
// shares of every rank into the step's slice checksums).
void add_rank_slice_share(proto::StepManifest* fragment, const std::string& tensor,
                          const TensorSlice& slice, uint64_t share);

// Checks `fragment` (a rank's own ranges, RangeCoverage::kPartial), writes it as FRAGMENT into
// `temp_dir` (the rank's fragment directory under its .tmp name, holding its other files),
// fsyncs and renames the directory to rank_fragment_dir: the rank's part is durable.
Status put_rank_fragment(const JournalLayout& layout, uint32_t rank, const std::string& temp_dir,
                         const proto::StepManifest& fragment);

// Waits until every rank 0..ranks-1 put its fragment of `version` in place, or `wait` passed
// (kDeadlineExceeded naming the ranks missing and saying the version is not committed), or a
// rank put a refusal instead (kFailedPrecondition with its reason; rank_plan.h).
Status wait_for_rank_fragments(const JournalLayout& layout, uint64_t version, uint32_t ranks,
                               std::chrono::milliseconds wait);

// Removes the fragments of every version up to `version` (committed, or abandoned: a rank that
// put its fragment in place after the writer gave up leaves it behind); later ones are kept.
Status remove_rank_fragments_up_to(const JournalLayout& layout, uint64_t version);

class RankFragmentWriter {
 public:
  // Starts rank `rank`'s fragment of delta version `version` (on version - 1) in the journal
  // at `root`, replacing a leftover of the same rank and version.
  static Result<std::unique_ptr<RankFragmentWriter>> open(const std::string& root, uint64_t version,
                                                          uint32_t rank,
                                                          DeltaPartOptions parts = {});
  ~RankFragmentWriter();
  RankFragmentWriter(const RankFragmentWriter&) = delete;
  RankFragmentWriter& operator=(const RankFragmentWriter&) = delete;

  // Adds the rank's range of tensor `name` (`dtype`, global `shape`): `delta` is the range's
  // record from version - 1 to version (EncodeOptions range_offset and tensor_elements), whose
  // header gives the range, its checksums and changes; with `box`, the record of that box
  // (EncodeOptions::slice). A range without changes is listed, its record not stored. A rank
  // may own several ranges of one tensor; add them in any order.
  Status add_range(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                   const EncodedDelta& delta, const TensorSlice* box = nullptr);
  // A range that did not change from version - 1 (or a type the delta codec does not encode,
  // which may not change): listed with its checksum C(), no record. `range` is a flat range
  // or a box.
  Status add_unchanged_range(const std::string& name, DType dtype,
                             const std::vector<int64_t>& shape, const TensorSlice& range,
                             uint64_t checksum);
  // The rank's share of C() over a slice an engine layout cuts (codec/slice_checksum.h
  // partial_checksums): the writer adds up the shares of every rank that lists one.
  void add_slice_share(const std::string& tensor, const TensorSlice& slice, uint64_t share);
  // Writes the last part and FRAGMENT, fsyncs them and puts the fragment in place. Once.
  // With `serve` (the writer opened with DeltaPartOptions::keep_in_memory), the parts are
  // served before the fragment is put in place, and FRAGMENT lists the descriptors.
  Status finish(const ServeRankParts& serve = {});

  uint64_t stored_bytes() const;

 private:
  RankFragmentWriter(JournalLayout layout, uint64_t version, uint32_t rank, DeltaPartOptions parts);
  Status add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
             uint64_t tensor_elements, proto::RangeRecord r, const EncodedDelta* delta);

  JournalLayout layout_;
  uint64_t version_;
  uint32_t rank_;
  std::string temp_dir_;
  proto::StepManifest fragment_;
  std::unordered_map<std::string, int> tensor_at_;  // name -> index in fragment_.tensors
  std::unique_ptr<DeltaPartWriter> parts_;
  bool finished_ = false;
};

// What the journal's writer gathers: every rank's fragment of `version`, merged into the
// version's manifest, their parts moved into `staged_dir` (the version's staging directory).
// `head` is the head version's manifest, which every tensor's ranges must start from. Waits
// until every rank 0..ranks-1 has put its fragment in place or `wait` has passed
// (kDeadlineExceeded naming the ranks missing). Fills tensors (in the head's order), parts and
// slice checksums (the sum of the ranks' shares); the caller sets the journal fields. With
// `live`, each rank's live descriptors, by rank.
Result<proto::StepManifest> merge_rank_fragments(
    const JournalLayout& layout, const proto::StepManifest& head, uint64_t version, uint32_t ranks,
    std::chrono::milliseconds wait, const std::string& staged_dir,
    std::vector<std::map<std::string, std::string>>* live = nullptr);

}  // namespace weightcast
