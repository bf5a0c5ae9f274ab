#include "codec/delta_manifest.h"

#include <string>

#include "codec/base/byte_io.h"

namespace weightcast {

proto::DType dtype_to_proto(DType dtype) {
  return static_cast<proto::DType>(dtype);
}

Result<DType> dtype_from_proto(proto::DType dtype) {
  const int code = static_cast<int>(dtype);
  if (code < 1 || code > 255) return data_loss("unknown dtype " + std::to_string(code));
  return dtype_from_code(static_cast<uint8_t>(code));
}

Result<proto::DeltaRecordInfo> describe_delta_record(const DeltaRecordView& record) {
  const DeltaRecordHeader& h = record.header;
  proto::DeltaRecordInfo info;
  info.set_tensor(h.name);
  info.set_dtype(dtype_to_proto(h.dtype));
  info.set_tensor_elements(h.tensor_elements);
  info.set_range_offset(h.range_offset);
  info.set_range_elements(h.range_elements);
  info.set_base_version(h.base_version);
  info.set_target_version(h.target_version);
  info.set_base_checksum(h.base_checksum);
  info.set_target_checksum(h.target_checksum);
  info.set_changed(h.changed);
  info.set_chunk_elements(h.chunk_elements);
  info.set_encoded_bytes(record.record_bytes);
  info.set_record_xxh3(record.stored_xxh3);
  for (size_t c = 0; c < record.chunks.size(); ++c) {
    const auto bytes = record.chunks[c];
    proto::ChunkInfo* chunk = info.add_chunks();
    chunk->set_encoded_bytes(static_cast<uint32_t>(bytes.size()));
    if (bytes.empty()) {
      chunk->set_mode(proto::CHUNK_UNCHANGED);
      continue;
    }
    if (bytes.size() < kChunkHeaderBytes || bytes[0] == 0 || bytes[0] > kMaxChunkMode) {
      return data_loss("tensor '" + h.name + "' chunk " + std::to_string(c) +
                       ": malformed chunk header");
    }
    chunk->set_mode(static_cast<proto::ChunkMode>(bytes[0]));
    chunk->set_value_bits(bytes[1]);
    chunk->set_changed(load_le<uint32_t>(bytes.data() + 4));
    const uint64_t values_at = kChunkHeaderBytes + uint64_t{load_le<uint32_t>(bytes.data() + 8)};
    if (bytes[0] != static_cast<uint8_t>(ChunkMode::kRaw) && values_at + 4 <= bytes.size()) {
      chunk->set_exceptions(load_le<uint32_t>(bytes.data() + values_at));
    }
  }
  return info;
}

proto::TensorSliceSpec slice_to_proto(const TensorSlice& slice) {
  proto::TensorSliceSpec p;
  if (slice.kind == TensorSlice::Kind::kFlat) {
    p.set_flat(true);
    p.set_begin(slice.begin);
    p.set_end(slice.end);
    return p;
  }
  for (const int64_t o : slice.offsets) p.add_offsets(o);
  for (const int64_t z : slice.sizes) p.add_sizes(z);
  return p;
}

TensorSlice slice_from_proto(const proto::TensorSliceSpec& spec) {
  if (spec.flat()) return TensorSlice::flat(spec.begin(), spec.end());
  return TensorSlice::box({spec.offsets().begin(), spec.offsets().end()},
                          {spec.sizes().begin(), spec.sizes().end()});
}

}  // namespace weightcast
