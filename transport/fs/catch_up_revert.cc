// CatchUpReader's way back (catch_up_reader.h): after some records of a delta version failed,
// the records already applied are reverted and every touched tensor is checked to hold its
// version again.
#include "codec/base/hex.h"
#include "transport/fs/catch_up_reader.h"

namespace weightcast {

Status CatchUpReader::revert_applied(const proto::StepManifest& m,
                                     std::span<const std::pair<size_t, DeltaRecordView>> records,
                                     std::span<const ShapedSlice* const> boxes,
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
  // A tensor of several range records is verified once, after the last of them that ran is
  // reverted (records are reverted last first; a tensor's records are consecutive).
  const auto last_of_tensor = [&](size_t k) {
    for (size_t j = k; j-- > 0 && records[j].first == records[k].first;) {
      if (done[j]) return false;
    }
    return true;
  };
  for (size_t k = records.size(); k-- > 0;) {
    const auto& [i, record] = records[k];
    if (!done[k]) continue;  // never ran: untouched
    if (!done[k]->ok()) {
      // A tensor that failed reverted itself (apply_delta's contract); a CUDA error may have
      // kept it from doing so, which its checksum shows.
      Status s = last_of_tensor(k) ? verify(i) : ok_status();
      if (!s.ok() && first_error.ok()) first_error = s;
      continue;
    }
    ApplyOptions a;
    a.pool = options_.pool;
    place(i, &a);
    a.record_slice = boxes[k];
    // A slice, and the whole tensor a box went into, are reverted as they were applied.
    const bool range = ranged(m, i) && !slices_[i] && boxes[k] == nullptr;
    Status s = revert_delta(record, range ? range_view(i, record.header) : refs_[i], undo[k], a);
    if (s.ok() && last_of_tensor(k)) s = verify(i);
    if (s.ok()) *written += (*done[k])->changed * refs_[i].element_size();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  return first_error;
}

}  // namespace weightcast
