#include "transport/fs/delta_step.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "codec/base/file_io.h"
#include "codec/delta_format.h"
#include "codec/part_compression.h"

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

DeltaPartWriter::~DeltaPartWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status DeltaPartWriter::add_record(proto::TensorState* tensor, std::span<const uint8_t> record) {
  if (part_size_ != 0 && part_size_ + record.size() > options_.part_bytes) {
    RETURN_IF_ERROR(flush_part());
  }
  if (part_size_ == 0) {
    // The part's capacity once: growing by doubling would copy it (and hold both copies)
    // every time; pages never written are not resident.
    buffer_.reserve(streamed() ? kDeltaPartPieceBytes
                               : std::max<uint64_t>(options_.part_bytes, record.size()) +
                                     kDeltaFileHeaderBytes);
    buffer_.resize(kDeltaFileHeaderBytes);  // filled in by flush_part
    part_size_ = kDeltaFileHeaderBytes;
    part_path_ = dir_ + "/" + part_file_name(manifest_->parts_size());
  }
  if (records_in_part_ == kMaxRecordsPerFile) {
    return out_of_range("delta part of " + dir_ + " would hold more than " +
                        std::to_string(kMaxRecordsPerFile) + " records");
  }
  ++records_in_part_;
  tensor->set_changed(true);
  tensor->set_part(static_cast<uint32_t>(manifest_->parts_size()));
  tensor->set_offset(part_size_);
  tensor->set_bytes(record.size());
  part_size_ += record.size();
  if (!streamed()) {
    buffer_.insert(buffer_.end(), record.begin(), record.end());
    return ok_status();
  }
  while (!record.empty()) {
    const size_t n = std::min<size_t>(record.size(), kDeltaPartPieceBytes - buffer_.size());
    buffer_.insert(buffer_.end(), record.begin(), record.begin() + n);
    record = record.subspan(n);
    if (buffer_.size() == kDeltaPartPieceBytes) RETURN_IF_ERROR(write_piece());
  }
  return ok_status();
}

Status DeltaPartWriter::write_piece() {
  const std::string& path = part_path_;
  if (options_.before_write) RETURN_IF_ERROR(options_.before_write(path, buffer_.size()));
  if (fd_ < 0) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return io_error("cannot create '" + path + "': " + std::strerror(errno));
  }
  RETURN_IF_ERROR(pwrite_all(fd_, path, buffer_, file_bytes_));
  file_bytes_ += buffer_.size();
  buffer_.clear();
  return ok_status();
}

Status DeltaPartWriter::finish() {
  if (part_size_ != 0) RETURN_IF_ERROR(flush_part());
  return ok_status();
}

Status DeltaPartWriter::flush_part() {
  proto::PartInfo* part = manifest_->add_parts();
  part->set_file(part_file_name(manifest_->parts_size() - 1));
  const std::vector<uint8_t> header = delta_file_header(records_in_part_);
  records_in_part_ = 0;
  part->set_raw_bytes(part_size_);
  part->set_compression(options_.compression);
  raw_bytes_ += part_size_;
  part_size_ = 0;
  if (fd_ >= 0) return finish_streamed_part(part, header);
  // The whole part is in buffer_ (not streamed, or smaller than one piece).
  std::memcpy(buffer_.data(), header.data(), header.size());
  std::span<const uint8_t> stored = buffer_;
  std::vector<uint8_t> compressed;
  if (options_.compression == proto::COMPRESSION_ZSTD_BYTE_PLANES) {
    PartCompressionOptions c;
    c.zstd_level = options_.zstd_level;
    c.plane_width = options_.plane_width;
    ASSIGN_OR_RETURN(compressed, compress_part(buffer_, c));
    stored = compressed;
  }
  part->set_bytes(stored.size());
  part->set_xxh3(XXH3_64bits(stored.data(), stored.size()));
  RETURN_IF_ERROR(write_and_sync_file(dir_ + "/" + part->file(), stored, options_.before_write));
  stored_bytes_ += stored.size();
  if (options_.keep_in_memory) {
    kept_.push_back(compressed.empty() ? std::move(buffer_) : std::move(compressed));
  }
  buffer_.clear();
  return ok_status();
}

Status DeltaPartWriter::finish_streamed_part(proto::PartInfo* part,
                                             std::span<const uint8_t> header) {
  const std::string path = part_path_;
  if (!buffer_.empty()) RETURN_IF_ERROR(write_piece());
  RETURN_IF_ERROR(pwrite_all(fd_, path, header, 0));
  if (::fsync(fd_) != 0) return io_error("cannot fsync '" + path + "': " + std::strerror(errno));
  // The part's hash from what the file holds, read back from the page cache piece by piece.
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) return internal_error("no memory for the XXH3 state of " + path);
  XXH3_64bits_reset(state);
  buffer_.resize(kDeltaPartPieceBytes);
  Status read = ok_status();
  for (uint64_t at = 0; at < file_bytes_ && read.ok();) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer_.size(), file_bytes_ - at));
    const ssize_t n = ::pread(fd_, buffer_.data(), want, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      read = io_error("cannot read back '" + path + "' at offset " + std::to_string(at) + ": " +
                      (n < 0 ? std::strerror(errno) : "end of file"));
      break;
    }
    XXH3_64bits_update(state, buffer_.data(), static_cast<size_t>(n));
    at += static_cast<uint64_t>(n);
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  RETURN_IF_ERROR(read);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return io_error("cannot close '" + path + "': " + std::strerror(errno));
  part->set_bytes(file_bytes_);
  part->set_xxh3(hash);
  stored_bytes_ += file_bytes_;
  file_bytes_ = 0;
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
