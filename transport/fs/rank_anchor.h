// Anchors written by several publisher ranks: one Hugging Face checkpoint (the shard files and
// index of plan_anchor, anchor_plan.h) however many ranks wrote it, with no rank holding the
// model (docs/DECISIONS.md "Several publisher ranks").
//
// The journal's writer stages the anchor (JournalWriter::stage_rank_anchor: a
// StreamingAnchorWriter creates the shard files in the version's staging directory, writes
// their headers and sizes them) and then puts READY in the version's fragments directory. Each
// rank (RankAnchorWriter) waits for READY, pwrites the elements it owns at their planned offsets,
// fsyncs, and puts its fragment in place: its ranges with their C(). The writer
// (JournalWriter::publish_rank_anchor) waits for every rank's fragment, marks their ranges
// written (an overlap is refused by name, a hole by the first missing element), reads the files
// back (extents' XXH3, tensors' C()), checks each tensor's C() against the ranks' sums and
// commits the anchor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/base/status.h"
#include "codec/formats/safetensors_format.h"
#include "codec/tensor_slice.h"
#include "transport/fs/anchor_plan.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// The file the writer puts in place once an anchor's shard files are ready for the ranks.
std::string rank_anchor_ready_path(const JournalLayout& layout, uint64_t version);

class RankAnchorWriter {
 public:
  // Rank `rank`'s part of anchor `version` of the journal at `root`, whose model is `specs`
  // (every tensor, in the writer's order) planned with `options` (the writer's
  // anchor_options(): the same plan). Waits up to `wait` for the writer's READY
  // (kDeadlineExceeded naming it).
  static Result<std::unique_ptr<RankAnchorWriter>> open(const std::string& root, uint64_t version,
                                                        uint32_t rank,
                                                        std::vector<SafetensorsTensorSpec> specs,
                                                        const AnchorWriteOptions& options,
                                                        std::chrono::milliseconds wait);
  ~RankAnchorWriter();
  RankAnchorWriter(const RankAnchorWriter&) = delete;
  RankAnchorWriter& operator=(const RankAnchorWriter&) = delete;

  // Writes `bytes` (whole elements, row-major, little-endian) as elements first_element.. of
  // tensor `name` at their offset in its shard file, and lists the range; returns the range's
  // C() (with global indices). Refused by name: an unknown tensor, bytes that are not whole
  // elements, a range past the tensor's end.
  Result<uint64_t> write(const std::string& name, uint64_t first_element,
                         std::span<const uint8_t> bytes);
  // Writes `bytes` (box `box`'s elements in its local order: row-major within the box) row by
  // row at their offsets in tensor `name`'s shard file, and lists the range as that box;
  // returns its C() (with global indices).
  Result<uint64_t> write_box(const std::string& name, const TensorSlice& box,
                             std::span<const uint8_t> bytes);
  // The rank's share of C() over a slice an engine layout cuts (codec/slice_checksum.h).
  void add_slice_share(const std::string& tensor, const TensorSlice& slice, uint64_t share);
  // fsyncs the shard files it wrote and puts its fragment in place. Once.
  Status finish();

 private:
  RankAnchorWriter() = default;
  Result<size_t> tensor_index(const std::string& name, const std::string& who) const;
  // pwrites `count` elements of tensor `i` from `data` at element first_element.
  Status write_run(size_t i, const std::string& who, uint64_t first_element, const uint8_t* data,
                   uint64_t count);
  // Lists a new range of tensor `i` with C() `checksum`; the caller says where it lies.
  proto::RangeRecord* add_range(size_t i, uint64_t checksum);

  JournalLayout layout_{""};
  uint32_t rank_ = 0;
  std::vector<SafetensorsTensorSpec> specs_;
  std::unordered_map<std::string, size_t> spec_at_;  // name -> index in specs_
  std::vector<int> state_at_;  // per spec, its index in fragment_.tensors (-1: none yet)
  AnchorPlan plan_;
  std::vector<int> fds_;  // per shard, opened at its first write; -1 until then
  std::string temp_dir_;
  proto::StepManifest fragment_;
  bool finished_ = false;
};

}  // namespace weightcast
