// The ZIP container of the torch.save artifact: STORED (uncompressed) entries only, as
// PyTorch's own writer (caffe2/serialize/inline_container.cc) produces them.
//
// Writer: every entry's data starts on a multiple of `alignment` bytes (64, like PyTorch, so a
// mapped file can be viewed as tensors in place). The padding is an extra field with id "FB"
// in the local header, exactly PyTorch's trick. ZIP64 records are written when a size, an
// offset or the entry count does not fit the classic fields (or when forced, for tests).
//
// Reader: takes the whole file as one span and never reads outside it. It accepts what the
// writer above, PyTorch (miniz, with or without data descriptors and its always-present
// ZIP64 end records) and Python's zipfile write for stored entries; it refuses compressed or
// encrypted entries, unsafe or duplicate names, overlapping entries and anything that does
// not add up. Entry data is returned as views into the file (no copies).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

// zlib's CRC-32 (the ZIP one), continued from `crc` (0 to start).
uint32_t zip_crc32(std::span<const uint8_t> data, uint32_t crc = 0);

// Checks an entry name the way the reader does: non-empty, at most `max_length` bytes, no NUL,
// no backslash, not absolute ("/x", "C:x"), no empty, "." or ".." component. The error names
// the entry.
Status validate_zip_entry_name(std::string_view name, size_t max_length);

// ---------------------------------------------------------------------------------------------
// Writing

struct ZipWriterOptions {
  uint64_t alignment = 64;   // data offsets are multiples of this (a power of two, <= 4096)
  bool force_zip64 = false;  // ZIP64 fields and end records even when nothing needs them
  size_t max_name_length = 4096;
};

// Emits a ZIP file to a ByteSink in one forward pass (no seeking): for each entry its local
// header (sizes and CRC filled in, no data descriptor), then its data; finish() emits the
// central directory and the end records. After any error the writer refuses further calls;
// the bytes already emitted are not a valid archive and must be discarded.
class ZipWriter {
 public:
  explicit ZipWriter(ByteSink sink, ZipWriterOptions options = {});

  // One whole entry: computes the CRC, writes header and data.
  Status add_stored(std::string_view name, std::span<const uint8_t> data);

  // A streamed entry whose size and CRC the caller knows up front: begin_stored, then
  // append() pieces totalling exactly `size` bytes, then end_stored(). end_stored() fails if
  // the bytes did not add up to `size` or their CRC differs from `crc32` (the bytes have been
  // emitted already; the output must then be discarded).
  Status begin_stored(std::string_view name, uint64_t size, uint32_t crc32);
  Status append(std::span<const uint8_t> piece);
  Status end_stored();

  // Writes the central directory and end records. No entry may be open.
  Status finish();

  uint64_t bytes_written() const { return offset_; }

 private:
  struct Written {
    std::string name;
    uint64_t local_offset = 0;
    uint64_t size = 0;
    uint32_t crc32 = 0;
    bool zip64_sizes = false;  // the local header carries ZIP64 sizes
  };
  Status emit(std::span<const uint8_t> bytes);
  Status fail(Status status);
  Status check_usable() const;
  std::vector<uint8_t> central_record(const Written& e) const;

  ByteSink sink_;
  ZipWriterOptions options_;
  std::vector<Written> entries_;
  uint64_t offset_ = 0;
  bool open_ = false;            // an entry is being streamed
  uint64_t open_remaining_ = 0;  // bytes the open entry still expects
  uint32_t open_crc_ = 0;        // CRC of the bytes appended so far
  bool verify_open_crc_ = true;  // false when add_stored computed the CRC from these bytes
  std::unordered_set<std::string> names_;
  bool finished_ = false;
  Status error_;  // first error; sticky
};

// ---------------------------------------------------------------------------------------------
// Reading

struct ZipLimits {
  size_t max_entries = size_t{1} << 20;
  size_t max_name_length = 4096;
  // Verify every entry's CRC-32 while parsing. Callers that verify lazily (huge files, one
  // entry at a time) turn this off and call verify_zip_entry_crc themselves.
  bool verify_crc = true;
};

struct ZipEntry {
  std::string name;
  std::span<const uint8_t> data;  // view into the parsed file
  uint32_t crc32 = 0;             // from the central directory
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // offset of data.front() in the file
};

struct ZipArchive {
  std::vector<ZipEntry> entries;  // central directory order
  bool zip64 = false;             // ZIP64 end records were present

  // The entry with exactly this name, or nullptr.
  const ZipEntry* find(std::string_view name) const;
};

// Parses and validates a whole ZIP file. Errors are data_loss (out_of_range for a limit) and
// name the entry and offset at fault. The returned spans point into `file`.
Result<ZipArchive> parse_zip(std::span<const uint8_t> file, const ZipLimits& limits = {});

// Recomputes an entry's CRC-32 and compares it with the stored one.
Status verify_zip_entry_crc(const ZipEntry& entry);

}  // namespace weightcast
