// The optional entropy stage for delta part files on the filesystem path: zstd on byte planes.
//
// A part (delta records back to back, docs/FORMATS.md) may be stored compressed. Before zstd
// sees the bytes they are split into `plane_width` byte planes, so that for 2-byte elements
// the sign/exponent bytes and the mantissa bytes each form a run of similar bytes. Plane
// width 1 is plain zstd.
//
// Compressed part ("WCZ1"), all integers little-endian:
//
//   offset  size  field
//   0       4     magic "WCZ1" (bytes 57 43 5A 31)
//   4       1     plane_width: 1, 2, 4 or 8
//   5       8     raw_bytes: length of the uncompressed part
//   13      rest  exactly one zstd frame (RFC 8878) whose declared content size is raw_bytes,
//                 with no dictionary; no bytes may follow it
//
// The frame's content is the input transposed into planes: with w = plane_width and
// n = raw_bytes / w (rounded down), plane k (0 <= k < w) is bytes k, k + w, ..., k + (n-1)w of
// the input, the planes follow each other in order (w * n bytes), and the last raw_bytes % w
// input bytes (a tail shorter than w) follow in their original order. Width 1 is the identity.
// Our writer also sets the zstd content checksum (XXH64 of the frame's content), so that a
// corrupted frame is reported here rather than as a wrong record further on; frames from
// other writers may omit it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

constexpr char kPartCompressionMagic[4] = {'W', 'C', 'Z', '1'};
constexpr size_t kPartCompressionHeaderBytes = 13;

struct PartCompressionOptions {
  // zstd level, ZSTD_minCLevel() ... ZSTD_maxCLevel() (0 is zstd's default, 3).
  int zstd_level = 1;
  // Bytes per element for the byte-plane split: 1 = plain zstd, 2 / 4 / 8 = byte planes.
  uint32_t plane_width = 2;
};

// Compresses one part into the format above. kInvalidArgument names a bad level or width;
// kInternal if zstd itself fails. Allocates a scratch copy of `raw` for widths > 1.
Result<std::vector<uint8_t>> compress_part(std::span<const uint8_t> raw,
                                           const PartCompressionOptions& options = {});

// Decompresses a part. The input is hostile until proven otherwise:
//   - too short for the header, wrong magic, width not 1/2/4/8           -> kDataLoss
//   - raw_bytes > max_raw_bytes                                           -> kOutOfRange
//   - not a zstd frame, a skippable frame, a dictionary frame, no content
//     size declared, content size != raw_bytes, truncated frame, bytes
//     after the frame, a frame that does not decode to exactly raw_bytes  -> kDataLoss
// Every check that does not need the decoded bytes runs before anything is allocated. The
// buffers sized by the input are then the result (raw_bytes <= max_raw_bytes) and, for
// widths > 1, one scratch of the same size that holds the planes before they are interleaved
// back; zstd decodes straight into them, so its context needs no window buffer.
Result<std::vector<uint8_t>> decompress_part(std::span<const uint8_t> compressed,
                                             uint64_t max_raw_bytes);

// The byte-plane transform on its own (exposed for tests and benchmarks). `out` must be as
// long as `in`; width must be 1, 2, 4 or 8, else nothing is written. split_byte_planes(in, w,
// out) then join_byte_planes(out, w, in2) gives in2 == in.
void split_byte_planes(std::span<const uint8_t> in, uint32_t width, std::span<uint8_t> out);
void join_byte_planes(std::span<const uint8_t> planes, uint32_t width, std::span<uint8_t> out);

}  // namespace weightcast
