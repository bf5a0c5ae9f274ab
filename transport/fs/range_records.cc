#include "transport/fs/range_records.h"

#include <algorithm>

#include "codec/delta_manifest.h"

namespace weightcast {

std::string describe_range(const proto::RangeRecord& r) {
  if (r.has_box()) return "rank " + std::to_string(r.rank()) + " " + describe_slice(range_slice(r));
  return "rank " + std::to_string(r.rank()) + " [" + std::to_string(r.range_offset()) + ", " +
         std::to_string(r.range_offset() + r.range_elements()) + ")";
}

TensorSlice range_slice(const proto::RangeRecord& r) {
  if (r.has_box()) return slice_from_proto(r.box());
  return TensorSlice::flat(r.range_offset(), r.range_offset() + r.range_elements());
}

namespace {

// The boxes of `t` (some of its ranges are): each a box inside the tensor, named by its first
// element and volume, none meeting another, and with `whole` all of them tiling it.
Status check_box_ranges(const proto::TensorState& t, const std::string& where, bool whole) {
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  if (static_cast<size_t>(t.ranges_size()) > kMaxBoxRangesPerTensor) {
    return data_loss(where + ": " + std::to_string(t.ranges_size()) +
                     " ranges with boxes among them exceed the limit " +
                     std::to_string(kMaxBoxRangesPerTensor));
  }
  std::vector<RankSlice> slices;
  for (const auto& r : t.ranges()) {
    const TensorSlice s = range_slice(r);
    if (r.has_box()) {
      const std::string range = where + " " + describe_range(r);
      if (s.kind != TensorSlice::Kind::kBox) return data_loss(range + ": its box is a flat range");
      if (Status valid = check_slice(t.name(), shape, s); !valid.ok()) {
        return data_loss(range + ": " + valid.message());
      }
      const SliceLocator at(shape, s);
      if (slice_elements(shape, s) != r.range_elements() || at.first() != r.range_offset()) {
        return data_loss(range + ": its first element and volume are not [" +
                         std::to_string(r.range_offset()) + ", +" +
                         std::to_string(r.range_elements()) + ")");
      }
    }
    slices.push_back({r.rank(), shape, DType::kU8, s});
  }
  if (Status tiled = check_tiling(t.name(), slices, whole); !tiled.ok()) {
    return data_loss(where + ": " + tiled.message());
  }
  return ok_status();
}

}  // namespace

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
  const bool boxes =
      std::any_of(t.ranges().begin(), t.ranges().end(), [](const auto& r) { return r.has_box(); });
  uint64_t end = 0, checksum = 0, changed_elements = 0;
  bool changed = false;
  for (int k = 0; k < t.ranges_size(); ++k) {
    const proto::RangeRecord& r = t.ranges(k);
    const std::string range = where + " " + describe_range(r);
    if (r.range_elements() == 0 || r.range_offset() > numel ||
        r.range_elements() > numel - r.range_offset()) {
      return data_loss(range + ": empty or outside the tensor's " + std::to_string(numel) +
                       " elements");
    }
    if (boxes) {  // boxes interleave: only their first elements ascend (checked as slices below)
      if (k > 0 && r.range_offset() <= t.ranges(k - 1).range_offset()) {
        return data_loss(range + ": out of order");
      }
    } else if (r.range_offset() < end) {
      return data_loss(range + ": overlaps the range before it or is out of order");
    }
    if (!boxes && coverage == RangeCoverage::kWhole && r.range_offset() != end) {
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
  if (boxes) RETURN_IF_ERROR(check_box_ranges(t, where, coverage == RangeCoverage::kWhole));
  if (coverage == RangeCoverage::kPartial) return ok_status();
  if (!boxes && end != numel) {
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
