#include "codec/delta_chunk.h"

#include <algorithm>
#include <string>

#include "codec/change_scan.h"
#include "codec/chunk_decode_hd.h"
#include "codec/chunk_plan_hd.h"
#include "codec/delta_kernels.h"
#include "codec/streamvbyte_gaps.h"

namespace weightcast {
namespace {

// The chunk's bytes from its n changed positions (scratch.positions) and their values
// (scratch.values, already computed): the same for encode_chunk and encode_scanned_chunk.
// The plan and the bits are the shared ones (chunk_plan_hd.h); Stream VByte's positions are
// written by libstreamvbyte's kernel, which needs more room than the section it leaves.
void encode_changes(const uint8_t* new_bytes, uint32_t length, size_t es, uint32_t n,
                    uint32_t allowed_modes, ChunkScratch& scratch, EncodedChunk* out) {
  const uint32_t* positions = scratch.positions.data();
  const uint32_t* values = scratch.values.data();
  const auto elem_size = static_cast<unsigned>(es);
  const hd::ChunkPlan plan = hd::plan_chunk(positions, values, n, length, elem_size, allowed_modes);
  const auto mode = static_cast<ChunkMode>(plan.mode);
  out->mode = mode;
  size_t room = size_t{plan.total_bytes} + kBitSinkSlack;
  if (mode == ChunkMode::kGapsStreamVByte) {
    room = std::max(
        room, kChunkHeaderBytes + streamvbyte_gaps_capacity(n) + plan.values_bytes + kBitSinkSlack);
  }
  out->bytes.resize(room);
  uint8_t* const begin = out->bytes.data();
  uint8_t* end;
  if (mode == ChunkMode::kGapsStreamVByte) {
    uint8_t* p = hd::write_chunk_header(begin, plan);
    p = write_streamvbyte_gaps(p, positions, n);
    end = hd::write_values(p, values, n, elem_size * 8, plan.value_bits, plan.exceptions);
  } else {
    end = hd::write_chunk(begin, plan, positions, values, new_bytes, length, elem_size);
  }
  out->bytes.resize(static_cast<size_t>(end - begin));  // plan.total_bytes
}

}  // namespace

void encode_chunk(const uint8_t* old_bytes, const uint8_t* new_bytes, uint32_t length, size_t es,
                  uint64_t global_first, uint32_t allowed_modes, ChunkScratch& scratch,
                  EncodedChunk* out) {
  out->bytes.clear();
  scratch.positions.resize(length);
  const uint32_t n = scan_changes(old_bytes, new_bytes, length, es, scratch.positions.data());
  out->changed = n;
  out->checksum_change = 0;
  out->mode = ChunkMode::kUnchanged;
  if (n == 0) return;
  scratch.values.resize(n);
  const uint32_t* positions = scratch.positions.data();
  uint32_t* values = scratch.values.data();
  out->checksum_change = kernels::dispatch(es, [&]<typename U>() {
    return kernels::encode_values<U>(old_bytes, new_bytes, positions, n, global_first, values);
  });
  encode_changes(new_bytes, length, es, n, allowed_modes, scratch, out);
}

void encode_scanned_chunk(uint32_t n, const uint8_t* new_bytes, uint32_t length, size_t es,
                          uint64_t global_first, uint32_t allowed_modes, ChunkScratch& scratch,
                          EncodedChunk* out, bool captured_new_bits) {
  out->bytes.clear();
  out->changed = n;
  out->checksum_change = 0;
  out->mode = ChunkMode::kUnchanged;
  if (n == 0) return;
  scratch.values.resize(n);
  const uint32_t* positions = scratch.positions.data();
  const uint32_t* old_bits = scratch.old_bits.data();
  uint32_t* values = scratch.values.data();
  out->checksum_change = kernels::dispatch(es, [&]<typename U>() {
    return kernels::encode_scanned_values<U>(old_bits,
                                             captured_new_bits ? scratch.new_bits.data() : nullptr,
                                             new_bytes, positions, n, global_first, values);
  });
  encode_changes(new_bytes, length, es, n, allowed_modes, scratch, out);
}

namespace {

// decode_chunk's words for a code: the header's checks name their numbers.
Status chunk_error(const char* where, hd::ChunkDecodeError code, const hd::ChunkHead& h,
                   size_t size, uint32_t length) {
  std::string what;
  switch (code) {
    case hd::kShortHeader:
      what = "chunk of " + std::to_string(size) + " bytes is shorter than its 12-byte header";
      break;
    case hd::kBadModeOrReserved:
      what = "unknown chunk mode " + std::to_string(h.mode) + " or reserved byte " +
             std::to_string(h.reserved);
      break;
    case hd::kBadChangedCount:
      what = "claims " + std::to_string(h.changed) + " changes in a chunk of " +
             std::to_string(length) + " elements";
      break;
    case hd::kPositionsPastEnd:
      what = "positions section of " + std::to_string(h.positions_bytes) +
             " bytes runs past the chunk end";
      break;
    case hd::kBadRawChunk:
      what = "raw chunk of " + std::to_string(size) + " bytes for " + std::to_string(length) +
             " elements";
      break;
    default:
      what = std::string(hd::chunk_decode_error_text(code)) + " (" +
             chunk_mode_name(static_cast<ChunkMode>(h.mode)) + " chunk, " +
             std::to_string(h.changed) + " changes in " + std::to_string(length) + " elements)";
      break;
  }
  return data_loss(std::string(where) + ": " + what);
}

}  // namespace

Status decode_chunk(std::span<const uint8_t> bytes, uint32_t length, size_t es, DecodedChunk* out,
                    const char* where) {
  const auto elem_size = static_cast<unsigned>(es);
  hd::ChunkHead h;
  hd::ChunkDecodeError e =
      hd::check_chunk_head_hd(bytes.data(), bytes.size(), length, elem_size, length, &h);
  if (e != hd::kDecodeOk) return chunk_error(where, e, h, bytes.size(), length);
  out->mode = static_cast<ChunkMode>(h.mode);
  out->changed = h.changed;
  const uint8_t* sec = bytes.data() + kChunkHeaderBytes;
  if (out->mode == ChunkMode::kRaw) {
    out->raw = std::span<const uint8_t>(sec, h.positions_bytes);
    out->positions.clear();
    out->values.clear();
    return ok_status();
  }
  out->positions.resize(h.changed);
  out->values.resize(h.changed);
  e = out->mode == ChunkMode::kGapsStreamVByte
          ? decode_streamvbyte_gaps(sec, h.positions_bytes, h.changed, length,
                                    out->positions.data())
          : hd::decode_positions(h, sec, h.positions_bytes, length, out->positions.data());
  if (e == hd::kDecodeOk) {
    e = hd::decode_values(sec + h.positions_bytes,
                          bytes.size() - kChunkHeaderBytes - h.positions_bytes, h.changed,
                          h.value_bits, elem_size * 8, out->values.data());
  }
  if (e != hd::kDecodeOk) return chunk_error(where, e, h, bytes.size(), length);
  return ok_status();
}

}  // namespace weightcast
