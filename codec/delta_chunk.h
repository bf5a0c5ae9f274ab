// One chunk of a sparse delta: the changes inside `length` consecutive elements.
//
// Bytes (FORMATS.md "chunk"): u8 mode, u8 value_bits, u8 rice_k, u8 reserved (0), u32 changed,
// u32 positions_bytes, then the positions section, then (every mode but raw) the values section.
// An unchanged chunk is stored as zero bytes in the record's chunk table.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_format.h"

namespace weightcast {

// Which modes the encoder may choose from (tests force one to cover every decoder).
enum ChunkModeMask : uint32_t {
  kAllowStreamVByte = 1u << 1,
  kAllowRice = 1u << 2,
  kAllowBitmap = 1u << 3,
  kAllowRaw = 1u << 4,
  kAllowAllModes = kAllowStreamVByte | kAllowRice | kAllowBitmap | kAllowRaw,
};

// Reusable per-thread buffers, so encoding a chunk allocates nothing in steady state.
struct ChunkScratch {
  std::vector<uint32_t> positions;
  std::vector<uint32_t> values;
  std::vector<uint32_t> old_bits;  // encode_scanned_chunk: the changed elements' old bits
  std::vector<uint32_t> new_bits;  // and, from a capture (change_capture.h), their new bits
};

struct EncodedChunk {
  std::vector<uint8_t> bytes;  // empty when nothing changed
  ChunkMode mode = ChunkMode::kUnchanged;
  uint32_t changed = 0;
  uint64_t checksum_change = 0;  // what this chunk adds to the covered range's checksum
};

// Encodes the chunk whose first element has global index `global_first`.
void encode_chunk(const uint8_t* old_bytes, const uint8_t* new_bytes, uint32_t length,
                  size_t elem_size, uint64_t global_first, uint32_t allowed_modes,
                  ChunkScratch& scratch, EncodedChunk* out);

// The same bytes from a scan made already: scratch.positions[0, n) the changed positions in
// ascending order and scratch.old_bits[0, n) their old bits (scan_and_copy_changes,
// change_scan.h), `new_bytes` the chunk's new values (all `length` of them: a dense chunk is
// stored raw). With `captured_new_bits`, the changes' new bits are read from
// scratch.new_bits[0, n) instead (expand_capture), and `new_bytes` only for a raw chunk.
void encode_scanned_chunk(uint32_t n, const uint8_t* new_bytes, uint32_t length, size_t elem_size,
                          uint64_t global_first, uint32_t allowed_modes, ChunkScratch& scratch,
                          EncodedChunk* out, bool captured_new_bits = false);

// A decoded chunk: ascending positions with their values, or (raw) the new values.
struct DecodedChunk {
  ChunkMode mode = ChunkMode::kUnchanged;
  uint32_t changed = 0;
  std::vector<uint32_t> positions;  // within the chunk
  std::vector<uint32_t> values;     // zigzag(diff) - 1, one per position
  std::span<const uint8_t> raw;     // kRaw: length * elem_size bytes of new values
};

// Decodes and fully validates a chunk before anything is written anywhere. `where` names the
// chunk in errors ("tensor 'x' chunk 7").
Status decode_chunk(std::span<const uint8_t> bytes, uint32_t length, size_t elem_size,
                    DecodedChunk* out, const char* where);

}  // namespace weightcast
