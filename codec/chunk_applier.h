// Applying one delta record's chunks to a destination, and undoing it (codec/delta_apply.cc
// apply_delta_host and revert_delta_host): where each change of a chunk goes (a whole or
// contiguous destination, a slice of the tensor, a record of a box), through the contiguous
// kernels wherever the changes' destinations can be computed run by run. Internal to the codec.
#pragma once

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/delta_chunk.h"
#include "codec/delta_format.h"
#include "codec/delta_kernels.h"
#include "codec/tensor_ref.h"
#include "codec/tensor_slice.h"
#include "codec/value_packing.h"

namespace weightcast::chunk_apply {

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
    if (record_slice != nullptr) {
      record_map_.emplace(record_slice->shape, record_slice->slice);
      even_ = even_runs(record_slice->shape, record_slice->slice);
    }
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
      } else if (addr_.contiguous() && record_slice != nullptr &&
                 slice_holds_box(slice->shape, slice->slice, record_slice->slice)) {
        // Each run of the record is a run of the slice's memory: its kernels, run by run.
        record_in_slice_ = slice_elements(slice->shape, slice->slice);
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
    if (record_map_ && (record_in_slice_ != 0 || (addr_.contiguous() && !slice_))) {
      // A box record into contiguous memory: its changes' elements run by run, then one pass.
      thread_local std::vector<int64_t> where;
      thread_local std::vector<uint64_t> globals;
      index_record_runs(c, chunk, &where, &globals);
      out->checksum_change += kernels::dispatch(es_, [&]<typename U>() {
        return kernels::apply_values_at<U>(base_, where.data(), globals.data(), chunk.values.data(),
                                           chunk.changed, runs_bound(), &out->changed);
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
    if (record_map_ && (record_in_slice_ != 0 || (addr_.contiguous() && !slice_))) {
      thread_local std::vector<int64_t> where;
      thread_local std::vector<uint64_t> globals;
      index_record_runs(c, chunk, &where, &globals);
      kernels::dispatch(es_, [&]<typename U>() {
        kernels::revert_values_at<U>(base_, where.data(), chunk.values.data(), chunk.changed,
                                     runs_bound());
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
    if (even_) {  // runs at a fixed stride: only those holding changes, found by division
      const uint64_t length = even_->length;
      while (k < chunk.changed) {
        const uint64_t r = (start + pos[k]) / length;
        const uint64_t to = (r + 1) * length - start;  // chunk position past the run
        uint32_t end = k + 1;
        while (end < chunk.changed && pos[end] < to) ++end;
        fn(even_->first + r * even_->stride - r * length + start, k, end - k);
        k = end;
      }
      return;
    }
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
  // Each change of chunk c of a box record: its element in the destination's memory (at) and
  // its global index.
  void index_record_runs(uint32_t c, const DecodedChunk& chunk, std::vector<int64_t>* at,
                         std::vector<uint64_t>* globals) const {
    at->resize(chunk.changed);
    globals->resize(chunk.changed);
    const uint32_t* pos = chunk.positions.data();
    for_each_record_run(c, chunk, [&](uint64_t run_global, uint32_t k, uint32_t n) {
      const int64_t first_pos = record_in_slice_ != 0 ? in_slice_first_pos(run_global, pos[k])
                                                      : static_cast<int64_t>(dest_first_) -
                                                            static_cast<int64_t>(run_global);
      for (uint32_t j = k; j < k + n; ++j) {
        (*at)[j] = static_cast<int64_t>(pos[j]) - first_pos;
        (*globals)[j] = run_global + pos[j];
      }
    });
  }
  // The elements the destination's memory holds, for the indices index_record_runs gives.
  uint64_t runs_bound() const {
    return record_in_slice_ != 0 ? record_in_slice_ : dest_end_ - dest_first_;
  }
  // For a record inside the slice: the chunk position the slice's local element 0 would have
  // in the run whose chunk position 0 is global `run_global`, found from its change at `pos`.
  int64_t in_slice_first_pos(uint64_t run_global, uint32_t pos) const {
    const uint64_t local = *slice_->local(run_global + pos);
    return static_cast<int64_t>(pos) - static_cast<int64_t>(local);
  }
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
  std::optional<EvenRuns> even_;  // the record's runs, when evenly spaced
  bool holds_record_ = false;     // a record of a slice into the whole tensor: every element held
  uint64_t record_in_slice_ = 0;  // a record inside the (strided) slice: the slice's elements
};

}  // namespace weightcast::chunk_apply
