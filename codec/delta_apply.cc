#include "codec/delta_apply.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/base/hex.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/chunk_applier.h"
#include "codec/delta_chunk.h"
#include "codec/delta_kernels.h"
#include "codec/host_codec.h"
#include "codec/slice_checksum.h"
#include "codec/tensor_bytes.h"
#include "codec/value_packing.h"

namespace weightcast {
namespace {

using chunk_apply::ChunkApplier;
using chunk_apply::ChunkOutcome;

template <typename F>
void for_chunks(ThreadPool* pool, uint32_t first, uint32_t end, F&& f) {
  if (pool != nullptr) {
    pool->parallel_for(end - first, [&](size_t i) { f(first + static_cast<uint32_t>(i)); });
  } else {
    for (uint32_t c = first; c < end; ++c) f(c);
  }
}

}  // namespace

Result<ApplyReport> apply_delta_host(const DeltaRecordView& record, const TensorRef& dest,
                                     const ApplyOptions& o) {
  const DeltaRecordHeader& h = record.header;
  const std::string who = "tensor '" + h.name + "'";
  ASSIGN_OR_RETURN(const ApplyRequest req, check_apply_request(record, dest, o));
  const uint64_t first = req.first;
  const bool whole = req.whole;
  const uint64_t expected_base = req.expected_base;
  const uint64_t expected_target = req.expected_target;

  if (o.caller_verifies && o.dest_slice == nullptr) {
    return invalid_argument(who + ": an apply the caller verifies takes a slice destination");
  }
  uint64_t current = 0;
  if (o.current_checksum || o.caller_verifies) {
    current = o.current_checksum.value_or(0);
  } else if (o.record_slice != nullptr) {
    // C() over the elements of the record's slice the destination holds.
    const TensorSlice held =
        o.dest_slice ? o.dest_slice->slice : TensorSlice::whole(o.record_slice->shape);
    ASSIGN_OR_RETURN(const std::vector<uint64_t> sums,
                     partial_checksums(dest, o.record_slice->shape, held, {o.record_slice->slice}));
    current = sums[0];
  } else if (o.dest_slice != nullptr) {
    ASSIGN_OR_RETURN(current, slice_checksum(dest, *o.dest_slice, h.range_offset,
                                             h.range_offset + h.range_elements));
  } else {
    ASSIGN_OR_RETURN(current, checksum_view_host(dest, first, o.pool));
  }
  if (!o.caller_verifies && current != expected_base) {
    return base_mismatch(h, current, expected_base);
  }

  const ChunkApplier applier(record, dest, first, o.dest_slice, o.record_slice);
  const uint32_t c0 = applier.first_chunk(), c1 = applier.end_chunk();
  std::vector<ChunkOutcome> outcomes(c1 - c0);
  for_chunks(o.pool, c0, c1, [&](uint32_t c) { applier.apply(c, &outcomes[c - c0]); });

  Status failure;
  ApplyReport report;
  report.checksum = current;
  for (const auto& out : outcomes) {
    if (!out.status.ok() && failure.ok()) failure = out.status;
    report.checksum += out.checksum_change;
    report.changed += out.changed;
  }
  if (failure.ok() && whole && report.changed != h.changed) {
    failure = data_loss(who + ": the record claims " + std::to_string(h.changed) +
                        " changed elements but its chunks hold " + std::to_string(report.changed));
  }
  if (failure.ok() && !o.caller_verifies && report.checksum != expected_target) {
    failure = target_mismatch(h, report.checksum, expected_target);
  }
  if (!failure.ok()) {
    for_chunks(o.pool, c0, c1, [&](uint32_t c) { (void)applier.revert(c, outcomes[c - c0]); });
    return failure;
  }
  if (o.undo != nullptr) {
    o.undo->raw.clear();
    for (uint32_t c = c0; c < c1; ++c) {
      ChunkOutcome& out = outcomes[c - c0];
      if (!out.raw) continue;
      o.undo->raw.push_back({c, std::move(out.undo_positions), std::move(out.undo_bits)});
    }
  }
  return report;
}

Status revert_delta_host(const DeltaRecordView& record, const TensorRef& dest,
                         const ApplyUndo& undo, const ApplyOptions& o) {
  const DeltaRecordHeader& h = record.header;
  RETURN_IF_ERROR(dest.validate());
  const uint64_t first = o.dest_first_element.value_or(h.range_offset);
  const ChunkApplier applier(record, dest, first, o.dest_slice, o.record_slice);
  const uint32_t c0 = applier.first_chunk(), c1 = applier.end_chunk();
  std::vector<ChunkOutcome> done(c1 - c0);
  for (auto& d : done) d.applied = true;
  for (const auto& raw : undo.raw) {
    if (raw.chunk < c0 || raw.chunk >= c1 || raw.positions.size() != raw.bits.size()) {
      return invalid_argument("tensor '" + h.name + "': undo of raw chunk " +
                              std::to_string(raw.chunk) + " does not belong to this apply");
    }
    ChunkOutcome& d = done[raw.chunk - c0];
    d.raw = true;
    d.undo_positions = raw.positions;
    d.undo_bits = raw.bits;
  }
  std::vector<uint8_t> reverted(c1 - c0, 1);
  for_chunks(o.pool, c0, c1, [&](uint32_t c) {
    if (record.chunks[c].empty()) return;
    reverted[c - c0] = applier.revert(c, done[c - c0]) ? 1 : 0;
  });
  for (uint32_t c = c0; c < c1; ++c) {
    if (reverted[c - c0] == 0) {
      return data_loss("tensor '" + h.name + "' chunk " + std::to_string(c) +
                       ": cannot be reverted (a raw chunk without its undo, or bytes that no "
                       "longer decode)");
    }
  }
  return ok_status();
}

}  // namespace weightcast
