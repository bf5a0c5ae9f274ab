// Files for the formats: a read-only mapping of a whole file, and a writer that makes a file
// appear whole or not at all (temp file, fsync, rename, directory fsync).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/byte_sink.h"
#include "codec/base/status.h"

namespace weightcast {

// A whole file mapped read-only. Empty files map to an empty span. Like read_whole_file, it
// never blocks on a FIFO: anything but a regular file is refused ("'p' is a FIFO, not a regular
// file"), a symlink loop is "symlink loop at 'p'".
class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads all of `path` with pread; refuses files larger than `max_bytes` (kOutOfRange). A missing
// file is kNotFound; a FIFO, directory, device or socket is refused without blocking
// (kInvalidArgument); every error names the file.
Result<std::vector<uint8_t>> read_whole_file(const std::string& path,
                                             uint64_t max_bytes = uint64_t{1} << 40);

// Reads bytes [offset, offset + bytes) of the regular file `path` with pread (kDataLoss when
// the file ends before; the refusals and errors of read_whole_file otherwise).
Result<std::vector<uint8_t>> read_file_range(const std::string& path, uint64_t offset,
                                             uint64_t bytes);

// Writes `path` through `<dir>/.<name>.tmp.<pid>`: bytes arrive through sink(); commit()
// fsyncs the file, renames it over `path` and fsyncs the directory. Destroying an
// uncommitted writer removes the temporary file, so nothing half-written is ever visible.
class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> create(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // Appends bytes (buffered in large writes).
  ByteSink sink();
  Status write(std::span<const uint8_t> bytes);
  Status commit();
  uint64_t bytes_written() const { return written_; }

 private:
  AtomicFileWriter() = default;
  std::string path_, temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// pwrite of all of `bytes` at `offset` of the open `fd` (EINTR and short writes retried); an
// error names `path` and the offset: "cannot write N bytes to 'path' at offset X: <strerror>".
Status pwrite_all(int fd, const std::string& path, std::span<const uint8_t> bytes, uint64_t offset);

// Writes `bytes` to `path` (created or truncated) and fsyncs it (no rename: for files inside a
// staging directory). `before_write` is a test hook (injected write failures).
Status write_and_sync_file(const std::string& path, std::span<const uint8_t> bytes,
                           const std::function<Status(const std::string&, uint64_t)>& before_write);

// Writes a small file atomically (AtomicFileWriter in one call).
Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);

// fsync of a directory, so that renames and unlinks in it are durable.
Status fsync_directory(const std::string& dir);

// Removes `path` if it exists and fsyncs its directory; a missing file is not an error.
Status remove_file_durably(const std::string& path);

}  // namespace weightcast
