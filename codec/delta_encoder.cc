#include "codec/delta_encoder.h"

#include <cstring>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/host_codec.h"

namespace weightcast {

Result<DeltaRecordHeader> delta_header_for(const EncodeOptions& o, uint64_t range_elements) {
  DeltaRecordHeader h;
  h.name = o.name;
  h.dtype = o.dtype;
  h.chunk_elements = o.chunk_elements;
  h.range_offset = o.range_offset;
  h.range_elements = range_elements;
  h.tensor_elements = o.tensor_elements != 0 ? o.tensor_elements : o.range_offset + range_elements;
  h.base_version = o.base_version;
  h.target_version = o.target_version;
  RETURN_IF_ERROR(h.validate());
  return h;
}

namespace {

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
    if (o.on_changes && chunks[c].changed != 0) {
      o.on_changes(h.range_offset + start, scratch.positions.data(), chunks[c].changed,
                   old_bytes.data() + start * es, new_bytes.data() + start * es);
    }
    if (compute_base) {
      base_parts[c] =
          checksum_range(old_bytes.data() + start * es, es, length, h.range_offset + start);
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
