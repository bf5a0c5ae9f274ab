#include "codec/delta_encoder.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/host_codec.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

Result<DeltaRecordHeader> delta_header_for(const EncodeOptions& o, uint64_t range_elements) {
  uint64_t tensor_elements =
      o.tensor_elements != 0 ? o.tensor_elements : o.range_offset + range_elements;
  if (o.slice != nullptr) {
    const std::string who = "tensor '" + o.name + "'";
    RETURN_IF_ERROR(check_slice(o.name, o.slice->shape, o.slice->slice));
    ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(o.slice->shape, who));
    const uint64_t held = slice_elements(o.slice->shape, o.slice->slice);
    if (o.range_offset != 0 || (o.tensor_elements != 0 && o.tensor_elements != numel) ||
        held != range_elements) {
      return invalid_argument(who + ": a record of slice " + describe_slice(o.slice->slice) +
                              " takes its " + std::to_string(held) +
                              " elements from range_offset 0 of the tensor's " +
                              std::to_string(numel) + ", not " + std::to_string(range_elements) +
                              " from " + std::to_string(o.range_offset));
    }
    tensor_elements = numel;
  }
  DeltaRecordHeader h;
  h.name = o.name;
  h.dtype = o.dtype;
  h.chunk_elements = o.chunk_elements;
  h.range_offset = o.range_offset;
  h.range_elements = range_elements;
  h.tensor_elements = tensor_elements;
  h.base_version = o.base_version;
  h.target_version = o.target_version;
  RETURN_IF_ERROR(h.validate());
  return h;
}

namespace {

// For a chunk of a slice's elements (EncodeOptions::slice), local indices [start, start +
// length): its change of C() and its base part (when `base` is given) over the elements'
// global indices, and on_changes once per run of consecutive global indices.
void slice_chunk_sums(const SliceIndexMap& map, const std::optional<EvenRuns>& even,
                      const EncodeOptions& o, const uint8_t* old_bytes, const uint8_t* new_bytes,
                      uint64_t start, uint32_t length, size_t es, const uint32_t* positions,
                      uint64_t* base, EncodedChunk* chunk) {
  const uint32_t n = chunk->changed;
  thread_local std::vector<uint32_t> run_positions;
  uint64_t change = 0;
  uint32_t k = 0;
  const auto take = [&](const SliceRun& run) {  // the changes of one run, clipped to the chunk
    const uint64_t at = run.local - start;      // the run's first position in the chunk
    if (base != nullptr)
      *base += checksum_range(old_bytes + run.local * es, es, run.count, run.global);
    run_positions.clear();
    for (; k < n && positions[k] < at + run.count; ++k) {
      uint64_t was = 0, now = 0;
      std::memcpy(&was, old_bytes + (start + positions[k]) * es, es);
      std::memcpy(&now, new_bytes + (start + positions[k]) * es, es);
      change += checksum_change(run.global + (positions[k] - at), was, now, es);
      run_positions.push_back(static_cast<uint32_t>(positions[k] - at));
    }
    if (o.on_changes && !run_positions.empty()) {
      o.on_changes(run.global, run_positions.data(), static_cast<uint32_t>(run_positions.size()),
                   old_bytes + run.local * es, new_bytes + run.local * es);
    }
    return true;
  };
  if (even && base == nullptr) {
    // Runs at a fixed stride: only those holding changes, found by division.
    while (k < n) {
      const uint64_t r = (start + positions[k]) / even->length;
      const uint64_t run_local = std::max(r * even->length, start);
      const uint64_t run_end = std::min((r + 1) * even->length, start + length);
      (void)take({even->first + r * even->stride + (run_local - r * even->length), run_local,
                  run_end - run_local});
    }
  } else {
    if (base != nullptr) *base = 0;
    map.for_each_run(start, start + length, take);
  }
  chunk->checksum_change = change;
}

// encode_delta; when `advance` is set, `old_bytes` is that buffer and each changed chunk is
// copied from new to old once encoded.
Result<EncodedDelta> encode(std::span<const uint8_t> old_bytes, std::span<const uint8_t> new_bytes,
                            const EncodeOptions& o, uint8_t* advance) {
  const size_t es = dtype_size(o.dtype);
  const std::string who = "tensor '" + o.name + "'";
  if (old_bytes.size() != new_bytes.size()) {
    return invalid_argument(who + ": old version has " + std::to_string(old_bytes.size()) +
                            " bytes, new version " + std::to_string(new_bytes.size()));
  }
  if (old_bytes.size() % es != 0) {
    return invalid_argument(who + ": " + std::to_string(old_bytes.size()) +
                            " bytes is not a whole number of " + std::string(dtype_name(o.dtype)) +
                            " elements");
  }
  EncodedDelta out;
  ASSIGN_OR_RETURN(out.header, delta_header_for(o, old_bytes.size() / es));
  DeltaRecordHeader& h = out.header;

  std::optional<SliceIndexMap> slice_map;
  std::optional<EvenRuns> even;
  if (o.slice != nullptr) {
    slice_map.emplace(o.slice->shape, o.slice->slice);
    even = even_runs(o.slice->shape, o.slice->slice);
  }
  const uint32_t chunk_count = h.chunk_count();
  std::vector<EncodedChunk> chunks(chunk_count);
  // Without a tracked base checksum, each chunk's part is computed right after its scan,
  // while its old bytes are still in cache: no second pass over memory.
  const bool compute_base = !o.base_checksum.has_value();
  std::vector<uint64_t> base_parts(compute_base ? chunk_count : 0);
  auto encode_one = [&](size_t c) {
    thread_local ChunkScratch scratch;
    const uint64_t start = uint64_t{h.chunk_elements} * c;
    const uint32_t length = h.chunk_length(static_cast<uint32_t>(c));
    encode_chunk(old_bytes.data() + start * es, new_bytes.data() + start * es, length, es,
                 h.range_offset + start, o.allowed_modes, scratch, &chunks[c]);
    if (slice_map) {
      // The chunk's elements are a slice's, not consecutive in the tensor.
      slice_chunk_sums(*slice_map, even, o, old_bytes.data(), new_bytes.data(), start, length, es,
                       scratch.positions.data(), compute_base ? &base_parts[c] : nullptr,
                       &chunks[c]);
    } else {
      if (o.on_changes && chunks[c].changed != 0) {
        o.on_changes(h.range_offset + start, scratch.positions.data(), chunks[c].changed,
                     old_bytes.data() + start * es, new_bytes.data() + start * es);
      }
      if (compute_base) {
        base_parts[c] =
            checksum_range(old_bytes.data() + start * es, es, length, h.range_offset + start);
      }
    }
    if (advance != nullptr && chunks[c].changed != 0) {
      std::memcpy(advance + start * es, new_bytes.data() + start * es, size_t{length} * es);
    }
  };
  if (o.pool != nullptr) {
    o.pool->parallel_for(chunk_count, encode_one);
  } else {
    for (size_t c = 0; c < chunk_count; ++c) encode_one(c);
  }

  if (compute_base) {
    h.base_checksum = 0;
    for (uint64_t part : base_parts) h.base_checksum += part;
  } else {
    h.base_checksum = *o.base_checksum;
  }
  uint64_t checksum = h.base_checksum;
  std::vector<std::vector<uint8_t>> payloads(chunk_count);
  for (uint32_t c = 0; c < chunk_count; ++c) {
    h.changed += chunks[c].changed;
    checksum += chunks[c].checksum_change;
    ++out.chunks_by_mode[static_cast<size_t>(chunks[c].mode)];
    payloads[c] = std::move(chunks[c].bytes);
  }
  h.target_checksum = checksum;
  out.record = assemble_delta_record(h, payloads);
  return out;
}

}  // namespace

Result<EncodedDelta> encode_delta(std::span<const uint8_t> old_bytes,
                                  std::span<const uint8_t> new_bytes, const EncodeOptions& o) {
  return encode(old_bytes, new_bytes, o, nullptr);
}

Result<EncodedDelta> encode_delta_advancing(std::span<uint8_t> snapshot,
                                            std::span<const uint8_t> new_bytes,
                                            const EncodeOptions& o) {
  return encode(snapshot, new_bytes, o, snapshot.data());
}

Result<EncodedDelta> encode_delta_views_host(const TensorRef& old_view, const TensorRef& new_view,
                                             const EncodeOptions& options) {
  for (const TensorRef* v : {&old_view, &new_view}) {
    RETURN_IF_ERROR(v->validate());
    if (!v->is_contiguous()) {
      return invalid_argument("tensor '" + options.name + "': view '" + v->name +
                              "' is not contiguous; the encoder reads contiguous elements");
    }
  }
  const auto bytes = [](const TensorRef& v) {
    return std::span<const uint8_t>(v.first_byte(), v.numel() * v.element_size());
  };
  return encode_delta(bytes(old_view), bytes(new_view), options);
}

}  // namespace weightcast
