// The range records of a delta step (journal.proto RangeRecord): a tensor that several
// publisher ranks wrote, one record per range a rank owns (docs/DECISIONS.md "Several
// publisher ranks"). What a manifest must hold for them, checked before a reader trusts it.
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// How much of its tensor a manifest's ranges must cover.
enum class RangeCoverage {
  kWhole,    // a committed step: the ranges tile the tensor, their sums are the tensor's
  kPartial,  // one rank's fragment (rank_fragments.h, rank_anchor.h): its own ranges, not
             // overlapping; an anchor's list no records
};

inline constexpr size_t kMaxRangesPerTensor = 65536;

// Tensor `t` (of `numel` elements) of manifest `m`: at most kMaxRangesPerTensor ranges, in
// ascending order, not overlapping, inside the tensor, each changed one's record inside its
// part (raw bytes), changed_elements within its range; with kWhole also no hole, and the
// tensor's checksum, changed flag and changed_elements the ranges' sums. Errors (kDataLoss)
// name `what`, the tensor and the range.
[[nodiscard]] Status check_range_records(const proto::StepManifest& m, const proto::TensorState& t,
                                         uint64_t numel, const std::string& what,
                                         RangeCoverage coverage);

// The sum of the base checksums of `t`'s ranges: C() of the whole tensor at the base version
// when the ranges tile it.
uint64_t ranges_base_checksum(const proto::TensorState& t);

// "rank 3 [100, 200)".
std::string describe_range(const proto::RangeRecord& r);

}  // namespace weightcast
