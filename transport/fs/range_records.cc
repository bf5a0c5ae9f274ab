#include "transport/fs/range_records.h"

namespace weightcast {

std::string describe_range(const proto::RangeRecord& r) {
  return "rank " + std::to_string(r.rank()) + " [" + std::to_string(r.range_offset()) + ", " +
         std::to_string(r.range_offset() + r.range_elements()) + ")";
}

uint64_t ranges_base_checksum(const proto::TensorState& t) {
  uint64_t sum = 0;
  for (const auto& r : t.ranges()) sum += r.base_checksum();
  return sum;
}

Status check_range_records(const proto::StepManifest& m, const proto::TensorState& t,
                           uint64_t numel, const std::string& what, RangeCoverage coverage) {
  const std::string where = what + ": tensor '" + t.name() + "'";
  // A committed step has them in deltas only; a rank's fragment of an anchor lists the ranges
  // it wrote into the shard files (rank_anchor.h), without records.
  const bool anchor_fragment =
      coverage == RangeCoverage::kPartial && m.kind() == proto::STEP_ANCHOR;
  if (m.kind() != proto::STEP_DELTA && !anchor_fragment) {
    return data_loss(where + ": range records outside a delta");
  }
  if (static_cast<size_t>(t.ranges_size()) > kMaxRangesPerTensor) {
    return data_loss(where + ": " + std::to_string(t.ranges_size()) +
                     " range records exceed the limit " + std::to_string(kMaxRangesPerTensor));
  }
  uint64_t end = 0, checksum = 0, changed_elements = 0;
  bool changed = false;
  for (const auto& r : t.ranges()) {
    const std::string range = where + " " + describe_range(r);
    if (r.range_elements() == 0 || r.range_offset() > numel ||
        r.range_elements() > numel - r.range_offset()) {
      return data_loss(range + ": empty or outside the tensor's " + std::to_string(numel) +
                       " elements");
    }
    if (r.range_offset() < end) {
      return data_loss(range + ": overlaps the range before it or is out of order");
    }
    if (coverage == RangeCoverage::kWhole && r.range_offset() != end) {
      return data_loss(where + ": elements [" + std::to_string(end) + ", " +
                       std::to_string(r.range_offset()) + ") are in no range (a hole)");
    }
    end = r.range_offset() + r.range_elements();
    if (r.changed_elements() > r.range_elements() || (r.changed_elements() != 0) != r.changed()) {
      return data_loss(range + ": " + std::to_string(r.changed_elements()) +
                       " changed elements disagree with its size or changed flag");
    }
    if (!r.changed() && r.base_checksum() != r.checksum()) {
      return data_loss(range + ": unchanged, yet its checksum moved");
    }
    if (r.changed() && anchor_fragment) return data_loss(range + ": a record in an anchor");
    if (r.changed()) {
      if (r.part() >= static_cast<uint32_t>(m.parts_size())) {
        return data_loss(range + ": names part " + std::to_string(r.part()) + " of " +
                         std::to_string(m.parts_size()));
      }
      const uint64_t size = m.parts(static_cast<int>(r.part())).raw_bytes();
      if (r.offset() > size || r.bytes() > size - r.offset()) {
        return data_loss(range + ": its record lies outside its part of " + std::to_string(size) +
                         " bytes");
      }
    }
    checksum += r.checksum();
    changed_elements += r.changed_elements();
    changed = changed || r.changed();
  }
  if (coverage == RangeCoverage::kPartial) return ok_status();
  if (end != numel) {
    return data_loss(where + ": elements [" + std::to_string(end) + ", " + std::to_string(numel) +
                     ") are in no range (a hole)");
  }
  if (checksum != t.checksum() || changed_elements != t.changed_elements() ||
      changed != t.changed()) {
    return data_loss(where +
                     ": its checksum, changed flag or changed elements are not the sums "
                     "of its ranges'");
  }
  return ok_status();
}

}  // namespace weightcast
