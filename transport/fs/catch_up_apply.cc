// The writing half of CatchUpReader (catch_up_reader.h): a delta version applied in place into
// the destinations, all or nothing, and a version an engine claims to hold, verified.
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
                                           const PartLoader& load_part) {
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
  std::vector<std::pair<size_t, DeltaRecordView>> records;
  for (size_t i = 0; i < destinations_.size(); ++i) {
    const auto& t = m.tensors(static_cast<int>(i));
    if (!t.changed()) {
      if (targets[i] != checksums_[i]) {
        return data_loss(what + ": unchanged tensor '" + t.name() +
                         "' lists a checksum other than the held one");
      }
      continue;
    }
    if (!parts.contains(t.part())) {
      ASSIGN_OR_RETURN(parts[t.part()], load_part(t.part()));
    }
    std::span<const uint8_t> bytes(parts[t.part()]);
    if (t.offset() > bytes.size() || t.bytes() > bytes.size() - t.offset()) {
      return data_loss(what + ": record of '" + t.name() + "' lies outside its part");
    }
    auto record = parse_delta_record(bytes.subspan(t.offset(), t.bytes()));
    if (!record.ok()) {
      return data_loss(what + ": record of '" + t.name() + "': " + record.status().message());
    }
    const DeltaRecordHeader& h = record->header;
    if (h.name != t.name() || h.base_version != m.base_version() || h.target_version != version ||
        h.target_checksum != t.checksum() || record->record_bytes != t.bytes()) {
      return data_loss(what + ": record of '" + t.name() + "' disagrees with the manifest");
    }
    records.emplace_back(i, std::move(*record));
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
    if (a.dest_slice != nullptr) {
      a.part_base_checksum = checksums_[i];
      a.part_target_checksum = targets[i];
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
  if (failure.ok()) {
    for (size_t k = 0; k < records.size(); ++k) checksums_[records[k].first] = (*done[k])->checksum;
    bytes_written_ += written;
    held_ = version;
    close_write_window();
    return ok_status();
  }
  const std::string base = std::to_string(m.base_version());
  Status reverted = revert_applied(records, undo, done, &written);
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

Status CatchUpReader::revert_applied(std::span<const std::pair<size_t, DeltaRecordView>> records,
                                     std::span<const ApplyUndo> undo,
                                     std::span<const std::optional<Result<ApplyReport>>> done,
                                     uint64_t* written) {
  Status first_error;
  const auto verify = [&](size_t i) {
    auto now = current_checksum(i);
    if (!now.ok()) return now.status();
    if (*now != checksums_[i]) {
      return checksum_mismatch("tensor '" + refs_[i].name + "' holds checksum " + hex16(*now) +
                               " after the revert, not the held " + hex16(checksums_[i]));
    }
    return ok_status();
  };
  for (size_t k = records.size(); k-- > 0;) {
    const auto& [i, record] = records[k];
    if (!done[k]) continue;  // never ran: untouched
    if (!done[k]->ok()) {
      // A tensor that failed reverted itself (apply_delta's contract); a CUDA error may have
      // kept it from doing so, which its checksum shows.
      Status s = verify(i);
      if (!s.ok() && first_error.ok()) first_error = s;
      continue;
    }
    ApplyOptions a;
    a.pool = options_.pool;
    place(i, &a);
    Status s = revert_delta(record, refs_[i], undo[k], a);
    if (s.ok()) s = verify(i);
    if (s.ok()) *written += (*done[k])->changed * refs_[i].element_size();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  return first_error;
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

void CatchUpReader::place(size_t i, ApplyOptions* options) const {
  if (slices_[i]) options->dest_slice = &*slices_[i];
}

}  // namespace weightcast
