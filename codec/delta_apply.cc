#include "codec/delta_apply.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/base/hex.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_chunk.h"
#include "codec/delta_kernels.h"
#include "codec/host_codec.h"
#include "codec/slice_checksum.h"
#include "codec/tensor_bytes.h"
#include "codec/value_packing.h"

namespace weightcast {
namespace {

// What applying one chunk did, kept so that it can be undone.
struct ChunkOutcome {
  Status status;
  bool applied = false;
  bool raw = false;
  uint64_t changed = 0;
  uint64_t checksum_change = 0;
  // Raw chunks overwrite values the record does not hold, so their old bits are saved.
  std::vector<uint32_t> undo_positions;
  std::vector<uint32_t> undo_bits;
};

class ChunkApplier {
 public:
  // `slice`: the destination holds that slice of the tensor (ApplyOptions::dest_slice), and
  // dest_first is unused. `record_slice`: the record's positions are that slice's local
  // indices (ApplyOptions::record_slice).
  ChunkApplier(const DeltaRecordView& record, const TensorRef& dest, uint64_t dest_first,
               const SliceDestination* slice, const ShapedSlice* record_slice)
      : rec_(record),
        h_(record.header),
        es_(dtype_size(record.header.dtype)),
        w_(static_cast<unsigned>(es_ * 8)),
        mask_(w_ >= 32 ? 0xFFFFFFFFu : (1u << w_) - 1),
        base_(dest.first_byte()),
        addr_(dest),
        dest_first_(dest_first),
        dest_end_(dest_first + dest.numel()) {
    if (record_slice != nullptr) record_map_.emplace(record_slice->shape, record_slice->slice);
    holds_record_ = record_slice != nullptr && slice == nullptr;
    if (slice != nullptr) {
      slice_.emplace(slice->shape, slice->slice);
      const uint64_t range_end = h_.range_offset + h_.range_elements;
      const uint64_t first = slice_->first();
      dest_first_ = std::clamp(first, h_.range_offset, range_end);
      dest_end_ = std::clamp(slice_->end(), dest_first_, range_end);
      if (record_map_) {  // the record's range is local: the slice's span bounds it
        dest_first_ = first;
        dest_end_ = slice_->end();
      }
      // A slice that is one run of global indices (a block of rows, a flat range) held in
      // contiguous memory maps like a range: element g is local g - first, and chunks take the
      // contiguous kernels.
      if (addr_.contiguous() &&
          slice_->end() - first == slice_elements(slice->shape, slice->slice)) {
        slice_.reset();
        base_ += (dest_first_ - first) * es_;
      }
    }
  }

  // Chunks that hold at least one element of the destination.
  uint32_t first_chunk() const {
    if (record_map_) return 0;
    return static_cast<uint32_t>((dest_first_ - h_.range_offset) / h_.chunk_elements);
  }
  uint32_t end_chunk() const {
    if (record_map_) return h_.chunk_count();
    if (dest_end_ == dest_first_) return first_chunk();
    return static_cast<uint32_t>((dest_end_ - 1 - h_.range_offset) / h_.chunk_elements) + 1;
  }

  void apply(uint32_t c, ChunkOutcome* out) const {
    if (rec_.chunks[c].empty()) return;
    thread_local DecodedChunk chunk;
    const std::string where = "tensor '" + h_.name + "' chunk " + std::to_string(c);
    out->status = decode_chunk(rec_.chunks[c], h_.chunk_length(c), es_, &chunk, where.c_str());
    if (!out->status.ok()) return;
    const uint64_t start = h_.range_offset + uint64_t{h_.chunk_elements} * c;
    out->applied = true;
    out->raw = chunk.mode == ChunkMode::kRaw;
    if (out->raw) {
      const uint32_t len = h_.chunk_length(c);
      for (uint32_t p = 0; p < len; ++p) {
        uint32_t v = 0;
        std::memcpy(&v, chunk.raw.data() + size_t{p} * es_, es_);
        write(global(start + p), p, v, /*is_diff=*/false, out);
      }
      const bool whole_chunk = holds_record_ || (!slice_ && !record_map_ && start >= dest_first_ &&
                                                 start + len <= dest_end_);
      if (whole_chunk && out->changed != chunk.changed) {
        out->status =
            data_loss(where + ": raw chunk claims " + std::to_string(chunk.changed) +
                      " changes but " + std::to_string(out->changed) + " elements differ");
      }
      return;
    }
    if (addr_.contiguous() && !slice_ && !record_map_) {
      const int64_t first_pos = static_cast<int64_t>(dest_first_) - static_cast<int64_t>(start);
      const uint64_t count = dest_end_ - dest_first_;
      const uint32_t* pos = chunk.positions.data();
      const uint32_t* val = chunk.values.data();
      out->checksum_change = kernels::dispatch(es_, [&]<typename U>() {
        return kernels::apply_values<U>(base_, pos, val, chunk.changed, first_pos, count, start,
                                        &out->changed);
      });
      return;
    }
    if (addr_.contiguous() && !slice_) {  // a slice's record: the same kernels, run by run
      for_each_record_run(c, chunk, [&](uint64_t run_global, uint32_t k, uint32_t n) {
        const int64_t first_pos =
            static_cast<int64_t>(dest_first_) - static_cast<int64_t>(run_global);
        out->checksum_change += kernels::dispatch(es_, [&]<typename U>() {
          return kernels::apply_values<U>(base_, chunk.positions.data() + k,
                                          chunk.values.data() + k, n, first_pos,
                                          dest_end_ - dest_first_, run_global, &out->changed);
        });
      });
      return;
    }
    for (uint32_t k = 0; k < chunk.changed; ++k) {
      write(global(start + chunk.positions[k]), chunk.positions[k],
            diff_from_value(chunk.values[k], w_), /*is_diff=*/true, out);
    }
  }

  // Restores the bytes a successful apply(c) changed; false when it cannot (a raw chunk
  // without its undo, a chunk that no longer decodes).
  bool revert(uint32_t c, const ChunkOutcome& done) const {
    if (!done.applied) return true;
    const uint64_t start = h_.range_offset + uint64_t{h_.chunk_elements} * c;
    if (done.raw) {
      for (size_t k = 0; k < done.undo_positions.size(); ++k) {
        store(at(global(start + done.undo_positions[k])), done.undo_bits[k]);
      }
      return true;
    }
    thread_local DecodedChunk chunk;
    // The chunk decoded cleanly when it was applied, from the same immutable bytes.
    if (!decode_chunk(rec_.chunks[c], h_.chunk_length(c), es_, &chunk, "revert").ok()) {
      return false;
    }
    if (chunk.mode == ChunkMode::kRaw) return false;  // its old bits were not kept
    if (addr_.contiguous() && !slice_ && !record_map_) {
      const int64_t first_pos = static_cast<int64_t>(dest_first_) - static_cast<int64_t>(start);
      const uint64_t count = dest_end_ - dest_first_;
      const uint32_t* pos = chunk.positions.data();
      const uint32_t* val = chunk.values.data();
      kernels::dispatch(es_, [&]<typename U>() {
        kernels::revert_values<U>(base_, pos, val, chunk.changed, first_pos, count);
      });
      return true;
    }
    if (addr_.contiguous() && !slice_) {
      for_each_record_run(c, chunk, [&](uint64_t run_global, uint32_t k, uint32_t n) {
        const int64_t first_pos =
            static_cast<int64_t>(dest_first_) - static_cast<int64_t>(run_global);
        kernels::dispatch(es_, [&]<typename U>() {
          kernels::revert_values<U>(base_, chunk.positions.data() + k, chunk.values.data() + k, n,
                                    first_pos, dest_end_ - dest_first_);
        });
      });
      return true;
    }
    for (uint32_t k = 0; k < chunk.changed; ++k) {
      uint8_t* p = at(global(start + chunk.positions[k]));
      if (p != nullptr) store(p, (load(p) - diff_from_value(chunk.values[k], w_)) & mask_);
    }
    return true;
  }

 private:
  // For a slice's record: chunk c's changes by run of consecutive global indices, as
  // fn(global index of chunk position 0 were the run extended, first change, changes).
  template <typename F>
  void for_each_record_run(uint32_t c, const DecodedChunk& chunk, F&& fn) const {
    const uint64_t start = h_.range_offset + uint64_t{h_.chunk_elements} * c;
    const uint32_t* pos = chunk.positions.data();
    uint32_t k = 0;
    record_map_->for_each_run(start, start + h_.chunk_length(c), [&](const SliceRun& run) {
      const uint64_t from = run.local - start, to = from + run.count;
      uint32_t end = k;
      while (end < chunk.changed && pos[end] < to) ++end;
      if (end > k) fn(run.global - from, k, end - k);
      k = end;
      return k < chunk.changed;
    });
  }
  // The global index of the record's element `k` (its range's index space).
  uint64_t global(uint64_t k) const { return record_map_ ? record_map_->global(k) : k; }
  // Where the destination holds element `global`; nullptr where it does not.
  uint8_t* at(uint64_t global) const {
    if (global < dest_first_ || global >= dest_end_) return nullptr;
    uint64_t local = global - dest_first_;
    if (slice_) {
      const std::optional<uint64_t> in_slice = slice_->local(global);
      if (!in_slice) return nullptr;
      local = *in_slice;
    }
    return base_ + addr_.offset_of(local) * static_cast<int64_t>(es_);
  }
  uint32_t load(const uint8_t* p) const {
    uint32_t v = 0;
    std::memcpy(&v, p, es_);
    return v;
  }
  void store(uint8_t* p, uint32_t v) const { std::memcpy(p, &v, es_); }

  void write(uint64_t global, uint32_t pos, uint32_t v, bool is_diff, ChunkOutcome* out) const {
    uint8_t* p = at(global);
    if (p == nullptr) return;
    const uint32_t old = load(p);
    const uint32_t now = is_diff ? (old + v) & mask_ : v;
    if (!is_diff) {
      if (now == old) return;
      out->undo_positions.push_back(pos);
      out->undo_bits.push_back(old);
    }
    store(p, now);
    out->checksum_change += checksum_change(global, old, now, es_);
    ++out->changed;
  }

  const DeltaRecordView& rec_;
  const DeltaRecordHeader& h_;
  size_t es_;
  unsigned w_;
  uint32_t mask_;
  uint8_t* base_;
  ElementAddresser addr_;
  uint64_t dest_first_;  // the global indices the destination may hold: [first, end)
  uint64_t dest_end_;
  std::optional<SliceLocator> slice_;
  std::optional<SliceIndexMap> record_map_;
  bool holds_record_ = false;  // a record of a slice into the whole tensor: every element held
};

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
