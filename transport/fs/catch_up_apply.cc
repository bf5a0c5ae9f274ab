// The writing half of CatchUpReader (catch_up_reader.h): a delta version applied in place into
// the destinations, all or nothing, and a version an engine claims to hold, verified.
#include <deque>
#include <map>
#include <optional>

#include "codec/base/hex.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_format.h"
#include "codec/slice_checksum.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/delta_step.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/range_records.h"
#include "transport/fs/slice_checksums.h"

namespace weightcast {

Status CatchUpReader::apply_delta_from(const proto::StepManifest& delta,
                                       std::vector<std::vector<uint8_t>> stored_parts,
                                       const std::string& source) {
  RETURN_IF_ERROR(check_manifest(delta, source));
  if (stored_parts.size() != static_cast<size_t>(delta.parts_size())) {
    return data_loss(source + ": " + std::to_string(stored_parts.size()) +
                     " parts arrived, its manifest lists " + std::to_string(delta.parts_size()));
  }
  return apply_delta_manifest(delta, source, [&](size_t index) {
    return check_delta_part(std::move(stored_parts[index]), delta, index,
                            source + " part " + std::to_string(index));
  });
}

Status CatchUpReader::apply_delta_manifest(const proto::StepManifest& m, const std::string& what,
                                           const PartLoader& load_part,
                                           const RecordLoader& load_record) {
  const uint64_t version = m.version();
  if (m.kind() != proto::STEP_DELTA || m.base_version() + 1 != version) {
    return data_loss(what + " is not a delta on version " + std::to_string(version - 1));
  }
  if (!held_ || *held_ != m.base_version()) {
    return failed_precondition(what + " applies to version " + std::to_string(m.base_version()));
  }
  if (!m.journal_id().empty() && !held_journal_.empty() && m.journal_id() != held_journal_) {
    return failed_precondition(what + " is a delta of journal " + m.journal_id() +
                               ", the held version " + std::to_string(*held_) + " is of journal " +
                               held_journal_);
  }
  RETURN_IF_ERROR(check_destinations(m, what));
  ASSIGN_OR_RETURN(const std::vector<uint64_t> targets, expected_checksums(m, what));
  // Everything is read and checked before the first byte is written. Only the records'
  // bytes are held (the parts), never a copy of a tensor.
  std::map<uint32_t, std::vector<uint8_t>> parts;
  std::deque<std::vector<uint8_t>> owned_records;  // records read alone (load_record)
  std::vector<std::pair<size_t, DeltaRecordView>> records;
  std::deque<ShapedSlice> box_slices;
  std::vector<const ShapedSlice*> boxes;  // per record: the box it covers, else null
  for (size_t i = 0; i < destinations_.size(); ++i) {
    const auto& t = m.tensors(static_cast<int>(i));
    if (!t.changed()) {
      if (targets[i] != checksums_[i]) {
        return data_loss(what + ": unchanged tensor '" + t.name() +
                         "' lists a checksum other than the held one");
      }
      continue;
    }
    // Where a record lies and what it must say: the tensor's one record, or each changed
    // range of a tensor several publisher ranks wrote (range_records.h).
    const bool ranged = !t.ranges().empty();
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    const auto take = [&](uint32_t part, uint64_t offset, uint64_t size, uint64_t first,
                          uint64_t count, uint64_t base, uint64_t target,
                          const proto::RangeRecord* range) -> Status {
      std::span<const uint8_t> bytes;
      std::optional<std::vector<uint8_t>> alone;
      if (ranged && load_record) {
        // A rank's part holds records of many tensors, of which a slice may need few: a
        // version the ranks wrote is read record by record, each checked by its own XXH3.
        ASSIGN_OR_RETURN(alone, load_record(part, offset, size));
      }
      if (alone) {
        bytes = owned_records.emplace_back(std::move(*alone));
        offset = 0;
      } else {
        if (!parts.contains(part)) {
          ASSIGN_OR_RETURN(parts[part], load_part(part));
        }
        bytes = parts[part];
      }
      if (offset > bytes.size() || size > bytes.size() - offset) {
        return data_loss(what + ": record of '" + t.name() + "' lies outside its part");
      }
      auto record = parse_delta_record(bytes.subspan(offset, size));
      if (!record.ok()) {
        return data_loss(what + ": record of '" + t.name() + "': " + record.status().message());
      }
      const DeltaRecordHeader& h = record->header;
      if (h.name != t.name() || h.base_version != m.base_version() || h.target_version != version ||
          h.target_checksum != target || record->record_bytes != size ||
          (ranged &&
           (h.range_offset != first || h.range_elements != count || h.base_checksum != base))) {
        return data_loss(what + ": record of '" + t.name() + "' disagrees with the manifest");
      }
      records.emplace_back(i, std::move(*record));
      boxes.push_back(range != nullptr && range->has_box()
                          ? &box_slices.emplace_back(ShapedSlice{shape, range_slice(*range)})
                          : nullptr);
      return ok_status();
    };
    if (!ranged) {
      RETURN_IF_ERROR(take(t.part(), t.offset(), t.bytes(), 0, 0, 0, t.checksum(), nullptr));
      continue;
    }
    RETURN_IF_ERROR(check_ranged_destination(i, t, what));
    // A slice reads only the records of the ranges its elements lie between.
    std::optional<SliceLocator> span;
    if (slices_[i]) span.emplace(slices_[i]->shape, slices_[i]->slice);
    for (const auto& r : t.ranges()) {
      if (!r.changed()) continue;
      if (span && (r.range_offset() >= span->end() ||
                   (!r.has_box() && r.range_offset() + r.range_elements() <= span->first()) ||
                   (r.has_box() && !slices_meet(shape, slices_[i]->slice, range_slice(r))))) {
        continue;
      }
      RETURN_IF_ERROR(take(r.part(), r.offset(), r.bytes(), record_range_offset(r),
                           r.range_elements(), r.base_checksum(), r.checksum(), &r));
    }
  }
  if (records.empty()) {
    held_ = version;
    return ok_status();
  }
  open_write_window(version);
  // Records of a few chunks apply side by side, one per thread; larger ones one at a time,
  // each spread over the pool by chunks (the pool runs one parallel_for at a time).
  const size_t threads = options_.pool != nullptr ? options_.pool->size() : 1;
  std::vector<size_t> small, large;
  for (size_t k = 0; k < records.size(); ++k) {
    (records[k].second.header.chunk_count() >= 2 * threads ? large : small).push_back(k);
  }
  std::vector<ApplyUndo> undo(records.size());
  std::vector<std::optional<Result<ApplyReport>>> done(records.size());  // nullopt: not run
  const auto apply_one = [&](size_t k, ThreadPool* pool) {
    const auto& [i, record] = records[k];
    ApplyOptions a;
    a.current_checksum = checksums_[i];
    a.pool = pool;
    a.undo = &undo[k];
    place(i, &a);
    a.record_slice = boxes[k];
    if (a.dest_slice != nullptr) {
      a.part_base_checksum = checksums_[i];
      a.part_target_checksum = targets[i];
    }
    if (ranged(m, i) && a.dest_slice != nullptr) {
      // The change each record makes to the slice; their sum is checked below.
      a.part_base_checksum.reset();
      a.part_target_checksum.reset();
      a.current_checksum.reset();
      a.caller_verifies = true;
      done[k] = apply_delta(record, refs_[i], a);
      return;
    }
    if (ranged(m, i)) {
      // Its range's elements of the tensor (a box's through its index map), from the range's
      // base (their sum was checked).
      a.current_checksum = record.header.base_checksum;
      done[k] = apply_delta(record, boxes[k] ? refs_[i] : range_view(i, record.header), a);
      return;
    }
    done[k] = apply_delta(record, refs_[i], a);
  };
  if (options_.pool != nullptr && small.size() > 1) {
    options_.pool->parallel_for(small.size(), [&](size_t j) { apply_one(small[j], nullptr); });
  } else {
    for (const size_t k : small) apply_one(k, nullptr);
  }
  bool failed_any = false;
  for (const size_t k : small) failed_any = failed_any || !done[k]->ok();
  for (const size_t k : large) {
    if (failed_any) break;  // the rest would only be reverted
    apply_one(k, options_.pool);
    failed_any = !done[k]->ok();
  }
  uint64_t written = 0;
  Status failure;
  size_t applied = 0;
  for (size_t k = 0; k < records.size(); ++k) {
    if (!done[k]) continue;
    if (done[k]->ok()) {
      written += (*done[k])->changed * refs_[records[k].first].element_size();
      ++applied;
    } else if (failure.ok()) {
      failure = done[k]->status();
    }
  }
  if (failure.ok()) failure = check_slice_sums(m, records, done, targets, what);
  if (failure.ok()) {
    for (size_t k = 0; k < records.size(); ++k) {
      const size_t i = records[k].first;
      checksums_[i] = ranged(m, i) ? targets[i] : (*done[k])->checksum;
    }
    bytes_written_ += written;
    held_ = version;
    close_write_window();
    return ok_status();
  }
  const std::string base = std::to_string(m.base_version());
  Status reverted = revert_applied(m, records, boxes, undo, done, &written);
  bytes_written_ += written;
  if (!reverted.ok()) {
    held_.reset();  // the destinations are between versions: an anchor brings them back
    return Status(failure.code(), what + ": " + failure.message() + "; reverting the " +
                                      std::to_string(applied) +
                                      " tensors already applied failed (" + reverted.message() +
                                      "): no version is held");
  }
  close_write_window();
  return Status(failure.code(),
                what + ": " + failure.message() + "; the " + std::to_string(applied) +
                    " tensors already applied were reverted: version " + base + " is held");
}

Status CatchUpReader::adopt(uint64_t version) {
  held_.reset();
  const std::string dir = layout_.step(version);
  ASSIGN_OR_RETURN(const proto::StepManifest m, read_manifest_file(dir + "/MANIFEST"));
  if (m.version() != version) {
    return data_loss(dir + "/MANIFEST is the manifest of version " + std::to_string(m.version()));
  }
  RETURN_IF_ERROR(check_destinations(m, dir));
  ASSIGN_OR_RETURN(const std::vector<uint64_t> expected, expected_checksums(m, dir));
  std::vector<uint64_t> sums(refs_.size());
  for (size_t i = 0; i < refs_.size(); ++i) {
    ASSIGN_OR_RETURN(sums[i], current_checksum(i));
    const uint64_t want = expected[i];
    if (sums[i] != want) {
      return checksum_mismatch("tensor '" + refs_[i].name + "' has checksum " + hex16(sums[i]) +
                               ", version " + std::to_string(version) + " of journal '" +
                               layout_.root() + "' has " + hex16(want) +
                               ": it does not hold that version");
    }
  }
  checksums_ = std::move(sums);
  held_ = version;
  held_journal_ = m.journal_id();
  return ok_status();
}

Result<std::vector<uint64_t>> CatchUpReader::expected_checksums(const proto::StepManifest& m,
                                                                const std::string& what) const {
  std::vector<uint64_t> out(destinations_.size());
  std::optional<SliceChecksumIndex> index;
  for (size_t i = 0; i < destinations_.size(); ++i) {
    const auto& t = m.tensors(static_cast<int>(i));
    if (!slices_[i]) {
      out[i] = t.checksum();
      continue;
    }
    if (!index) index.emplace(m);
    const proto::SliceChecksum* entry = index->find(t.name(), slices_[i]->slice);
    if (entry == nullptr) {
      return data_loss(what + " has no checksum for slice " + describe_slice(slices_[i]->slice) +
                       " of tensor '" + t.name() +
                       "' (the group config's layouts, which the publisher reads, must cut it)");
    }
    out[i] = entry->checksum();
  }
  return out;
}

Result<uint64_t> CatchUpReader::current_checksum(size_t i) const {
  if (!slices_[i]) return checksum_view(refs_[i], 0, options_.pool);
  if (refs_[i].memory == MemoryKind::kCuda) {
    return invalid_argument("tensor '" + refs_[i].name +
                            "': a slice in CUDA memory is not supported by the journal reader");
  }
  return slice_checksum(refs_[i], *slices_[i]);
}

bool CatchUpReader::ranged(const proto::StepManifest& m, size_t i) {
  return !m.tensors(static_cast<int>(i)).ranges().empty();
}

TensorRef CatchUpReader::range_view(size_t i, const DeltaRecordHeader& h) const {
  const TensorRef& whole = refs_[i];
  TensorRef v = TensorRef::contiguous(whole.name, whole.dtype,
                                      whole.first_byte() + h.range_offset * whole.element_size(),
                                      static_cast<int64_t>(h.range_elements));
  v.memory = whole.memory;
  v.device = whole.device;
  return v;
}

Status CatchUpReader::check_slice_sums(const proto::StepManifest& m,
                                       std::span<const std::pair<size_t, DeltaRecordView>> records,
                                       std::span<const std::optional<Result<ApplyReport>>> done,
                                       std::span<const uint64_t> targets,
                                       const std::string& what) const {
  std::map<size_t, uint64_t> sums;  // slices of tensors in ranges: held + the records' changes
  for (size_t i = 0; i < refs_.size(); ++i) {
    if (slices_[i] && ranged(m, i)) sums[i] = checksums_[i];
  }
  for (size_t k = 0; k < records.size(); ++k) {
    const auto it = sums.find(records[k].first);
    if (it != sums.end()) it->second += (*done[k])->checksum;
  }
  for (const auto& [i, sum] : sums) {
    if (sum == targets[i]) continue;
    return checksum_mismatch(what + ": tensor '" + refs_[i].name + "' slice " +
                             describe_slice(slices_[i]->slice) +
                             ": after applying its ranges' "
                             "records the checksum is " +
                             hex16(sum) + ", the version lists " + hex16(targets[i]));
  }
  return ok_status();
}

Status CatchUpReader::check_ranged_destination(size_t i, const proto::TensorState& t,
                                               const std::string& what) const {
  const std::string who =
      what + ": tensor '" + t.name() + "' was written by several publisher ranks";
  // A slice's result is checked as a sum (check_slice_sums); its held checksum is its own.
  if (slices_[i]) return ok_status();
  if (!refs_[i].is_contiguous()) {
    return failed_precondition(who + "; its destination '" + refs_[i].name +
                               "' is strided, and range records apply to contiguous ones");
  }
  const uint64_t base = ranges_base_checksum(t);
  if (base != checksums_[i]) {
    return failed_precondition(who + ": the destination holds checksum " + hex16(checksums_[i]) +
                               ", the ranges start from " + hex16(base) +
                               ": refusing to apply; it holds another version");
  }
  return ok_status();
}

void CatchUpReader::place(size_t i, ApplyOptions* options) const {
  if (slices_[i]) options->dest_slice = &*slices_[i];
}

}  // namespace weightcast
