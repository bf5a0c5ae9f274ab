// The part files of a delta step: delta files (docs/FORMATS.md "Delta file": a 16-byte header
// and the records of changed tensors back to back) of about `part_bytes` each (a record larger
// than that gets a part of its own), so `weightcast delta inspect` reads any part. Each part's
// XXH3-64 is in the manifest; parts may be compressed with zstd on byte planes
// (codec/part_compression.h), which measured not to pay on deltas (docs/PERFORMANCE.md).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/file_io.h"  // write_and_sync_file
#include "codec/base/status.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

struct DeltaPartOptions {
  uint64_t part_bytes = uint64_t{64} << 20;
  proto::PartCompression compression = proto::COMPRESSION_NONE;
  int zstd_level = 1;
  uint32_t plane_width = 2;
  // Also keep each part's stored bytes in memory (take_stored_parts), for a live transport
  // that serves the step besides the journal (src/endpoint/publisher.h).
  bool keep_in_memory = false;
  // Test hook (injected ENOSPC): called before every file write; an error becomes the write's.
  std::function<Status(const std::string& file, uint64_t bytes)> before_write;
};

// A version's delta from the version before, as a live transport serves it: the delta
// manifest (for an anchor: the one of the delta it carries) and each part's stored bytes.
struct DeltaInMemory {
  proto::StepManifest manifest;
  std::vector<std::vector<uint8_t>> parts;
};

// Builds the parts of one delta step inside `dir` (a staging directory) and records them in
// `manifest`: parts, and for each added tensor changed/part/offset/bytes. Part files are
// written and fsynced as they fill; the directory is the caller's to fsync. An uncompressed
// part that is not kept in memory goes to its file in pieces of kDeltaPartPieceBytes as the
// records arrive (its header last, its XXH3 read back from the file): the writer holds one
// piece, not the delta.
inline constexpr uint64_t kDeltaPartPieceBytes = uint64_t{1} << 20;

class DeltaPartWriter {
 public:
  DeltaPartWriter(std::string dir, DeltaPartOptions options, proto::StepManifest* manifest);
  ~DeltaPartWriter();  // closes a part file left open by an error (the staging dir is dropped)
  DeltaPartWriter(const DeltaPartWriter&) = delete;
  DeltaPartWriter& operator=(const DeltaPartWriter&) = delete;

  // Appends `record` (a whole delta record) as the bytes of `tensor`, which must belong to
  // the manifest given at construction.
  Status add_record(proto::TensorState* tensor, std::span<const uint8_t> record);
  // Writes the last part. Call once, after the last add_record.
  Status finish();

  uint64_t raw_bytes() const { return raw_bytes_; }
  uint64_t stored_bytes() const { return stored_bytes_; }
  // The parts' stored bytes in manifest order (empty unless keep_in_memory), moved out.
  std::vector<std::vector<uint8_t>> take_stored_parts() { return std::move(kept_); }

 private:
  Status flush_part();
  bool streamed() const {
    return !options_.keep_in_memory && options_.compression == proto::COMPRESSION_NONE;
  }
  Status write_piece();  // buffer_ to the open part file at file_bytes_ (opens it)
  Status finish_streamed_part(proto::PartInfo* part, std::span<const uint8_t> header);

  std::string dir_;
  DeltaPartOptions options_;
  proto::StepManifest* manifest_;
  std::vector<uint8_t> buffer_;
  uint64_t raw_bytes_ = 0;
  uint64_t stored_bytes_ = 0;
  uint32_t records_in_part_ = 0;
  uint64_t part_size_ = 0;   // bytes of the open part so far (header included)
  std::string part_path_;    // the open part's file
  int fd_ = -1;              // streamed: the open part's file, once a piece went out
  uint64_t file_bytes_ = 0;  // streamed: bytes of the open part already in its file
  std::vector<std::vector<uint8_t>> kept_;
};

// Reads part `index` of a delta step from `step_dir`: checks its size and XXH3-64 against the
// manifest and decompresses it. kNotFound for a missing file, kDataLoss naming the file for
// anything else wrong with it.
Result<std::vector<uint8_t>> read_delta_part(const std::string& step_dir,
                                             const proto::StepManifest& manifest, size_t index);

// The same checks and decompression for part `index` whose stored bytes arrived another way
// (a live transport); `what` names where they came from in errors.
Result<std::vector<uint8_t>> check_delta_part(std::vector<uint8_t> stored,
                                              const proto::StepManifest& manifest, size_t index,
                                              const std::string& what);

}  // namespace weightcast
