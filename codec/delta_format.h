// The sparse delta record: one tensor (or one element range of it) from version b to v.
// docs/FORMATS.md documents these bytes one by one; this header is their single definition.
//
//   record  = header, chunk size table, chunk payloads, XXH3-64 trailer
//   chunk   = the changes inside a fixed run of `chunk_elements` elements, encoded alone
//
// All integers are little-endian. Parsing enforces the limits below and never trusts a size
// before checking it against the bytes that are actually there.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"

namespace weightcast {

constexpr uint32_t kDeltaRecordMagic = 0x52444357;  // "WCDR"
constexpr uint16_t kDeltaFormatVersion = 1;
constexpr size_t kDeltaFixedHeaderBytes = 96;
constexpr size_t kDeltaTrailerBytes = 8;
constexpr uint32_t kDefaultChunkElements = 1u << 16;

// Limits every parser enforces (outside input is hostile until proven otherwise).
constexpr uint32_t kMaxChunkElements = 1u << 20;
constexpr uint32_t kMinChunkElements = 64;
constexpr size_t kMaxTensorNameBytes = 4096;
constexpr uint64_t kMaxRangeElements = uint64_t{1} << 40;
// At most this many chunks per record (a chunk index is 32 bits, and a CUDA grid's x limit).
constexpr uint64_t kMaxChunksPerRecord = uint64_t{1} << 30;

// How a chunk stores its changed positions (values follow in every mode but kRaw).
enum class ChunkMode : uint8_t {
  kUnchanged = 0,        // nothing changed; header only
  kGapsStreamVByte = 1,  // gaps i_k - i_{k-1} - 1 as Stream VByte
  kGapsRice = 2,         // gaps as Golomb-Rice codes with parameter rice_k
  kBitmap = 3,           // one bit per element of the chunk
  kRaw = 4,              // the chunk's new raw values, every element
};
constexpr uint8_t kMaxChunkMode = 4;
constexpr size_t kChunkHeaderBytes =
    12;  // mode, value_bits, rice_k, reserved, changed, positions_bytes
constexpr unsigned kMaxRiceK = 20;

const char* chunk_mode_name(ChunkMode mode);

struct DeltaRecordHeader {
  std::string name;
  DType dtype = DType::kBF16;
  uint32_t chunk_elements = kDefaultChunkElements;
  uint64_t tensor_elements = 0;  // elements of the logical full tensor
  uint64_t range_offset = 0;     // global flat index of the first covered element
  uint64_t range_elements = 0;   // covered elements
  uint64_t base_version = 0;
  uint64_t target_version = 0;
  uint64_t base_checksum = 0;    // C() of the covered range at base_version (global indices)
  uint64_t target_checksum = 0;  // C() of the covered range at target_version
  uint64_t changed = 0;          // elements whose bits differ

  uint32_t chunk_count() const {
    return static_cast<uint32_t>((range_elements + chunk_elements - 1) / chunk_elements);
  }
  uint32_t chunk_length(uint32_t chunk) const;
  // Checks the fields against each other and against the limits; names the tensor.
  Status validate() const;
};

// A parsed record: the header plus where each chunk's bytes are. Spans point into the buffer
// given to parse_delta_record, which must outlive this view.
struct DeltaRecordView {
  DeltaRecordHeader header;
  std::vector<std::span<const uint8_t>> chunks;
  uint64_t stored_xxh3 = 0;
  size_t record_bytes = 0;    // bytes the record occupies, trailer included
  size_t payload_offset = 0;  // bytes from the record's start to chunk 0's bytes
};

struct ParseOptions {
  // Verify the XXH3-64 trailer. Only fuzzers and corruption tests turn this off, to reach
  // the structural checks behind it.
  bool verify_hash = true;
};

// Serialises header + chunk table + chunks + trailer into one record.
std::vector<uint8_t> assemble_delta_record(const DeltaRecordHeader& header,
                                           const std::vector<std::vector<uint8_t>>& chunks);

// The same record from a chunk size table and the chunks' bytes back to back (what the CUDA
// encoder produces).
std::vector<uint8_t> assemble_delta_record(const DeltaRecordHeader& header,
                                           std::span<const uint32_t> chunk_sizes,
                                           std::span<const uint8_t> payload);

// Parses the record at the start of `bytes` (trailing bytes after it are left alone; see
// record_bytes). Errors say which field is wrong and where.
Result<DeltaRecordView> parse_delta_record(std::span<const uint8_t> bytes,
                                           const ParseOptions& options = {});

// A file of records: "WCDELTA\0", u16 format version, u16 flags (0), u32 record count, records.
constexpr char kDeltaFileMagic[8] = {'W', 'C', 'D', 'E', 'L', 'T', 'A', '\0'};
constexpr size_t kDeltaFileHeaderBytes = 16;
constexpr uint32_t kMaxRecordsPerFile = 1u << 20;
std::vector<uint8_t> delta_file_header(uint32_t record_count);
Result<std::vector<DeltaRecordView>> parse_delta_file(std::span<const uint8_t> bytes,
                                                      const ParseOptions& options = {});

}  // namespace weightcast
