#include "transport/fs/delta_step.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "codec/delta_format.h"
#include "codec/part_compression.h"
#include "transport/file_io.h"

namespace weightcast {
namespace {

std::string part_file_name(int index) {
  char name[32];
  std::snprintf(name, sizeof name, "part-%05d.wcd", index);
  return name;
}

}  // namespace

DeltaPartWriter::DeltaPartWriter(std::string dir, DeltaPartOptions options,
                                 proto::StepManifest* manifest)
    : dir_(std::move(dir)), options_(std::move(options)), manifest_(manifest) {}

Status DeltaPartWriter::add_record(proto::TensorState* tensor, std::span<const uint8_t> record) {
  if (!buffer_.empty() && buffer_.size() + record.size() > options_.part_bytes) {
    RETURN_IF_ERROR(flush_part());
  }
  if (buffer_.empty()) {
    // The part's capacity once: growing by doubling would copy it (and hold both copies)
    // every time; pages never written are not resident.
    buffer_.reserve(std::max<uint64_t>(options_.part_bytes, record.size()) + kDeltaFileHeaderBytes);
    buffer_.resize(kDeltaFileHeaderBytes);  // filled in by flush_part
  }
  if (records_in_part_ == kMaxRecordsPerFile) {
    return out_of_range("delta part of " + dir_ + " would hold more than " +
                        std::to_string(kMaxRecordsPerFile) + " records");
  }
  ++records_in_part_;
  tensor->set_changed(true);
  tensor->set_part(static_cast<uint32_t>(manifest_->parts_size()));
  tensor->set_offset(buffer_.size());
  tensor->set_bytes(record.size());
  buffer_.insert(buffer_.end(), record.begin(), record.end());
  return ok_status();
}

Status DeltaPartWriter::finish() {
  if (!buffer_.empty()) RETURN_IF_ERROR(flush_part());
  return ok_status();
}

Status DeltaPartWriter::flush_part() {
  proto::PartInfo* part = manifest_->add_parts();
  part->set_file(part_file_name(manifest_->parts_size() - 1));
  const std::vector<uint8_t> header = delta_file_header(records_in_part_);
  std::memcpy(buffer_.data(), header.data(), header.size());
  records_in_part_ = 0;
  part->set_raw_bytes(buffer_.size());
  std::span<const uint8_t> stored = buffer_;
  std::vector<uint8_t> compressed;
  if (options_.compression == proto::COMPRESSION_ZSTD_BYTE_PLANES) {
    PartCompressionOptions c;
    c.zstd_level = options_.zstd_level;
    c.plane_width = options_.plane_width;
    ASSIGN_OR_RETURN(compressed, compress_part(buffer_, c));
    stored = compressed;
  }
  part->set_compression(options_.compression);
  part->set_bytes(stored.size());
  part->set_xxh3(XXH3_64bits(stored.data(), stored.size()));
  RETURN_IF_ERROR(write_and_sync_file(dir_ + "/" + part->file(), stored, options_.before_write));
  raw_bytes_ += buffer_.size();
  stored_bytes_ += stored.size();
  if (options_.keep_in_memory) {
    kept_.push_back(compressed.empty() ? std::move(buffer_) : std::move(compressed));
  }
  buffer_.clear();
  return ok_status();
}

Result<std::vector<uint8_t>> read_delta_part(const std::string& step_dir,
                                             const proto::StepManifest& manifest, size_t index) {
  if (index >= static_cast<size_t>(manifest.parts_size())) {
    return invalid_argument("part " + std::to_string(index) + " of " + step_dir +
                            " does not exist");
  }
  const proto::PartInfo& part = manifest.parts(static_cast<int>(index));
  const std::string path = step_dir + "/" + part.file();
  auto bytes = read_whole_file(path, part.bytes());
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kOutOfRange) {
      return data_loss("'" + path + "' is larger than the " + std::to_string(part.bytes()) +
                       " bytes its manifest lists");
    }
    return bytes.status();
  }
  return check_delta_part(std::move(*bytes), manifest, index, "'" + path + "'");
}

Result<std::vector<uint8_t>> check_delta_part(std::vector<uint8_t> stored,
                                              const proto::StepManifest& manifest, size_t index,
                                              const std::string& what) {
  if (index >= static_cast<size_t>(manifest.parts_size())) {
    return invalid_argument("part " + std::to_string(index) + " (" + what + ") does not exist");
  }
  const proto::PartInfo& part = manifest.parts(static_cast<int>(index));
  if (stored.size() != part.bytes()) {
    return data_loss(what + " has " + std::to_string(stored.size()) +
                     " bytes, its manifest lists " + std::to_string(part.bytes()) + " (truncated)");
  }
  if (XXH3_64bits(stored.data(), stored.size()) != part.xxh3()) {
    return data_loss(what + ": XXH3 mismatch (part corrupted)");
  }
  if (part.compression() == proto::COMPRESSION_NONE) return stored;
  auto raw = decompress_part(stored, part.raw_bytes());
  if (!raw.ok()) return data_loss(what + ": " + raw.status().message());
  if (raw->size() != part.raw_bytes()) {
    return data_loss(what + " decompresses to " + std::to_string(raw->size()) +
                     " bytes, its manifest lists " + std::to_string(part.raw_bytes()));
  }
  return raw;
}

}  // namespace weightcast
