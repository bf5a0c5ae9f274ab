// The range records of a delta step (journal.proto RangeRecord): a tensor that several
// publisher ranks wrote, one record per range a rank owns (docs/DECISIONS.md "Several
// publisher ranks"). What a manifest must hold for them, checked before a reader trusts it.
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"
#include "codec/tensor_slice.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// How much of its tensor a manifest's ranges must cover.
enum class RangeCoverage {
  kWhole,    // a committed step: the ranges tile the tensor, their sums are the tensor's
  kPartial,  // one rank's fragment (rank_fragments.h, rank_anchor.h): its own ranges, not
             // overlapping; an anchor's list no records
};

inline constexpr size_t kMaxRangesPerTensor = 65536;
// Boxes are checked against each other pairwise, so a tensor holds fewer of them.
inline constexpr size_t kMaxBoxRangesPerTensor = 4096;

// Tensor `t` (of `numel` elements) of manifest `m`: at most kMaxRangesPerTensor ranges
// (kMaxBoxRangesPerTensor when one is a box), in ascending order of their first element, not
// overlapping, inside the tensor (a box with its first element and volume as range_offset and
// range_elements), each changed one's record inside its
// part (raw bytes), changed_elements within its range; with kWhole also no hole, and the
// tensor's checksum, changed flag and changed_elements the ranges' sums. Errors (kDataLoss)
// name `what`, the tensor and the range.
[[nodiscard]] Status check_range_records(const proto::StepManifest& m, const proto::TensorState& t,
                                         uint64_t numel, const std::string& what,
                                         RangeCoverage coverage);

// The sum of the base checksums of `t`'s ranges: C() of the whole tensor at the base version
// when the ranges tile it.
uint64_t ranges_base_checksum(const proto::TensorState& t);

// "rank 3 [100, 200)", or "rank 3 [0:4, 8:16]" for a box.
std::string describe_range(const proto::RangeRecord& r);

// The elements a range covers: its box, or the flat range.
TensorSlice range_slice(const proto::RangeRecord& r);
// Where its record's range starts: 0 for a box (the record's positions are the box's local
// indices), else the range's first global index.
inline uint64_t record_range_offset(const proto::RangeRecord& r) {
  return r.has_box() ? 0 : r.range_offset();
}

}  // namespace weightcast
