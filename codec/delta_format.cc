#include "codec/delta_format.h"

#include <xxhash.h>

#include "codec/base/byte_io.h"
#include "codec/base/hex.h"

namespace weightcast {
namespace {

size_t padded_name_bytes(size_t name_length) {
  return (name_length + 3) & ~size_t{3};
}

std::string quoted(const std::string& name) {
  return "'" + name + "'";
}

}  // namespace

const char* chunk_mode_name(ChunkMode mode) {
  switch (mode) {
    case ChunkMode::kUnchanged:
      return "unchanged";
    case ChunkMode::kGapsStreamVByte:
      return "gaps-streamvbyte";
    case ChunkMode::kGapsRice:
      return "gaps-rice";
    case ChunkMode::kBitmap:
      return "bitmap";
    case ChunkMode::kRaw:
      return "raw";
  }
  return "unknown";
}

uint32_t DeltaRecordHeader::chunk_length(uint32_t chunk) const {
  const uint64_t start = uint64_t{chunk} * chunk_elements;
  return static_cast<uint32_t>(std::min<uint64_t>(chunk_elements, range_elements - start));
}

Status DeltaRecordHeader::validate() const {
  const std::string who = "delta record for tensor " + quoted(name);
  const size_t es = dtype_size(dtype);
  if (es != 1 && es != 2 && es != 4) {
    return invalid_argument(who + ": dtype " + std::string(dtype_name(dtype)) + " has " +
                            std::to_string(es) +
                            "-byte elements; sparse deltas support 1, 2 and 4");
  }
  if (name.size() > kMaxTensorNameBytes) {
    return out_of_range(who + ": name of " + std::to_string(name.size()) + " bytes exceeds " +
                        std::to_string(kMaxTensorNameBytes));
  }
  if (chunk_elements < kMinChunkElements || chunk_elements > kMaxChunkElements) {
    return out_of_range(who + ": chunk_elements " + std::to_string(chunk_elements) + " outside [" +
                        std::to_string(kMinChunkElements) + ", " +
                        std::to_string(kMaxChunkElements) + "]");
  }
  if (range_elements > kMaxRangeElements || tensor_elements > kMaxRangeElements) {
    return out_of_range(who + ": " + std::to_string(range_elements) + " of " +
                        std::to_string(tensor_elements) + " elements exceeds the limit 2^40");
  }
  if ((range_elements + chunk_elements - 1) / chunk_elements > kMaxChunksPerRecord) {
    return out_of_range(who + ": " + std::to_string(range_elements) + " elements in chunks of " +
                        std::to_string(chunk_elements) + " make more than 2^30 chunks");
  }
  if (range_offset > tensor_elements || range_elements > tensor_elements - range_offset) {
    return invalid_argument(who + ": range [" + std::to_string(range_offset) + ", +" +
                            std::to_string(range_elements) + ") lies outside the tensor's " +
                            std::to_string(tensor_elements) + " elements");
  }
  if (changed > range_elements) {
    return invalid_argument(who + ": " + std::to_string(changed) +
                            " changed elements in a range of " + std::to_string(range_elements));
  }
  if (target_version <= base_version) {
    return invalid_argument(who + ": target version " + std::to_string(target_version) +
                            " is not after base version " + std::to_string(base_version));
  }
  return ok_status();
}

namespace {

void append_record_head(const DeltaRecordHeader& h, uint64_t payload, size_t chunk_count,
                        std::vector<uint8_t>* out) {
  append_le<uint32_t>(out, kDeltaRecordMagic);
  append_le<uint16_t>(out, kDeltaFormatVersion);
  append_le<uint8_t>(out, static_cast<uint8_t>(h.dtype));
  append_le<uint8_t>(out, static_cast<uint8_t>(dtype_size(h.dtype)));
  append_le<uint32_t>(out, h.chunk_elements);
  append_le<uint32_t>(out, static_cast<uint32_t>(h.name.size()));
  for (uint64_t v : {h.tensor_elements, h.range_offset, h.range_elements, h.base_version,
                     h.target_version, h.base_checksum, h.target_checksum, h.changed, payload}) {
    append_le<uint64_t>(out, v);
  }
  append_le<uint32_t>(out, static_cast<uint32_t>(chunk_count));
  append_le<uint32_t>(out, 0);  // reserved
  out->insert(out->end(), h.name.begin(), h.name.end());
  out->resize(out->size() + padded_name_bytes(h.name.size()) - h.name.size(), 0);
}

}  // namespace

std::vector<uint8_t> assemble_delta_record(const DeltaRecordHeader& h,
                                           const std::vector<std::vector<uint8_t>>& chunks) {
  uint64_t payload = 0;
  for (const auto& c : chunks) payload += c.size();
  std::vector<uint8_t> out;
  out.reserve(kDeltaFixedHeaderBytes + padded_name_bytes(h.name.size()) + 4 * chunks.size() +
              payload + kDeltaTrailerBytes);
  append_record_head(h, payload, chunks.size(), &out);
  for (const auto& c : chunks) append_le<uint32_t>(&out, static_cast<uint32_t>(c.size()));
  for (const auto& c : chunks) out.insert(out.end(), c.begin(), c.end());
  append_le<uint64_t>(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::vector<uint8_t> assemble_delta_record(const DeltaRecordHeader& h,
                                           std::span<const uint32_t> chunk_sizes,
                                           std::span<const uint8_t> payload) {
  std::vector<uint8_t> out;
  out.reserve(kDeltaFixedHeaderBytes + padded_name_bytes(h.name.size()) + 4 * chunk_sizes.size() +
              payload.size() + kDeltaTrailerBytes);
  append_record_head(h, payload.size(), chunk_sizes.size(), &out);
  for (uint32_t size : chunk_sizes) append_le<uint32_t>(&out, size);
  out.insert(out.end(), payload.begin(), payload.end());
  append_le<uint64_t>(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<DeltaRecordView> parse_delta_record(std::span<const uint8_t> bytes,
                                           const ParseOptions& options) {
  ByteCursor cur(bytes);
  uint32_t magic = 0, chunk_elements = 0, name_length = 0, chunk_count = 0, reserved = 0;
  uint16_t version = 0;
  uint8_t dtype_code = 0, elem_size = 0;
  uint64_t fields[9];
  if (!cur.read(&magic) || !cur.read(&version) || !cur.read(&dtype_code) || !cur.read(&elem_size) ||
      !cur.read(&chunk_elements) || !cur.read(&name_length)) {
    return data_loss("delta record truncated: " + std::to_string(bytes.size()) +
                     " bytes, the fixed header needs " + std::to_string(kDeltaFixedHeaderBytes));
  }
  if (magic != kDeltaRecordMagic) {
    return data_loss("not a delta record: magic " + hex16(magic) + " where " +
                     hex16(kDeltaRecordMagic) + " (\"WCDR\") belongs");
  }
  if (version != kDeltaFormatVersion) {
    return data_loss("delta record format version " + std::to_string(version) +
                     " is not supported (this build reads version " +
                     std::to_string(kDeltaFormatVersion) + ")");
  }
  for (auto& f : fields) {
    if (!cur.read(&f)) return data_loss("delta record truncated inside the fixed header");
  }
  if (!cur.read(&chunk_count) || !cur.read(&reserved)) {
    return data_loss("delta record truncated inside the fixed header");
  }
  if (name_length > kMaxTensorNameBytes) {
    return data_loss("delta record tensor name length " + std::to_string(name_length) +
                     " exceeds the limit " + std::to_string(kMaxTensorNameBytes));
  }
  std::span<const uint8_t> name_bytes;
  if (!cur.take(padded_name_bytes(name_length), &name_bytes)) {
    return data_loss("delta record truncated inside the tensor name");
  }
  DeltaRecordView view;
  DeltaRecordHeader& h = view.header;
  h.name.assign(name_bytes.begin(), name_bytes.begin() + name_length);
  const std::string who = "delta record for tensor " + quoted(h.name);
  ASSIGN_OR_RETURN(h.dtype, dtype_from_code(dtype_code));
  if (elem_size != dtype_size(h.dtype)) {
    return data_loss(who + ": element size " + std::to_string(elem_size) +
                     " disagrees with dtype " + std::string(dtype_name(h.dtype)));
  }
  if (reserved != 0)
    return data_loss(who + ": reserved header field is " + std::to_string(reserved));
  h.chunk_elements = chunk_elements;
  h.tensor_elements = fields[0];
  h.range_offset = fields[1];
  h.range_elements = fields[2];
  h.base_version = fields[3];
  h.target_version = fields[4];
  h.base_checksum = fields[5];
  h.target_checksum = fields[6];
  h.changed = fields[7];
  const uint64_t payload_bytes = fields[8];
  if (Status s = h.validate(); !s.ok()) return data_loss(s.message());
  if (chunk_count != h.chunk_count()) {
    return data_loss(who + ": " + std::to_string(chunk_count) + " chunks where " +
                     std::to_string(h.range_elements) + " elements in chunks of " +
                     std::to_string(h.chunk_elements) + " make " + std::to_string(h.chunk_count()));
  }
  if (cur.remaining() / 4 < chunk_count) return data_loss(who + ": truncated chunk size table");
  std::vector<uint32_t> sizes(chunk_count);
  uint64_t total = 0;
  for (auto& s : sizes) {
    (void)cur.read(&s);
    total += s;
  }
  if (total != payload_bytes) {
    return data_loss(who + ": chunk sizes add up to " + std::to_string(total) +
                     " bytes but the header says " + std::to_string(payload_bytes));
  }
  if (cur.remaining() < kDeltaTrailerBytes || cur.remaining() - kDeltaTrailerBytes < total) {
    return data_loss(who + ": truncated: payload of " + std::to_string(total) + " bytes but only " +
                     std::to_string(cur.remaining()) + " bytes remain");
  }
  view.chunks.resize(chunk_count);
  view.payload_offset = cur.position();
  for (uint32_t c = 0; c < chunk_count; ++c) (void)cur.take(sizes[c], &view.chunks[c]);
  const size_t hashed = cur.position();
  (void)cur.read(&view.stored_xxh3);
  view.record_bytes = cur.position();
  if (options.verify_hash) {
    const uint64_t actual = XXH3_64bits(bytes.data(), hashed);
    if (actual != view.stored_xxh3) {
      return data_loss(who + ": XXH3-64 of the record is " + hex16(actual) +
                       " but the trailer says " + hex16(view.stored_xxh3) +
                       " (the record is corrupt)");
    }
  }
  return view;
}

std::vector<uint8_t> delta_file_header(uint32_t record_count) {
  std::vector<uint8_t> out(kDeltaFileMagic, kDeltaFileMagic + 8);
  append_le<uint16_t>(&out, kDeltaFormatVersion);
  append_le<uint16_t>(&out, 0);
  append_le<uint32_t>(&out, record_count);
  return out;
}

Result<std::vector<DeltaRecordView>> parse_delta_file(std::span<const uint8_t> bytes,
                                                      const ParseOptions& options) {
  if (bytes.size() < kDeltaFileHeaderBytes ||
      std::memcmp(bytes.data(), kDeltaFileMagic, sizeof(kDeltaFileMagic)) != 0) {
    return data_loss("not a weightcast delta file (missing the \"WCDELTA\" magic)");
  }
  const auto version = load_le<uint16_t>(bytes.data() + 8);
  const auto flags = load_le<uint16_t>(bytes.data() + 10);
  const auto count = load_le<uint32_t>(bytes.data() + 12);
  if (version != kDeltaFormatVersion) {
    return data_loss("delta file format version " + std::to_string(version) + " is not supported");
  }
  if (flags != 0) return data_loss("delta file flags " + std::to_string(flags) + " are unknown");
  if (count > kMaxRecordsPerFile) {
    return data_loss("delta file claims " + std::to_string(count) + " records, over the limit " +
                     std::to_string(kMaxRecordsPerFile));
  }
  std::vector<DeltaRecordView> records;
  size_t at = kDeltaFileHeaderBytes;
  for (uint32_t r = 0; r < count; ++r) {
    auto rec = parse_delta_record(bytes.subspan(at), options);
    if (!rec.ok())
      return rec.status().with_context("record " + std::to_string(r) + " at byte " +
                                       std::to_string(at));
    at += rec->record_bytes;
    records.push_back(std::move(rec).value());
  }
  if (at != bytes.size()) {
    return data_loss("delta file has " + std::to_string(bytes.size() - at) +
                     " trailing bytes after its " + std::to_string(count) + " records");
  }
  return records;
}

}  // namespace weightcast
