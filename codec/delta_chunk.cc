#include "codec/delta_chunk.h"

#include <cstring>
#include <string>

#include "codec/base/byte_io.h"
#include "codec/change_scan.h"
#include "codec/delta_kernels.h"
#include "codec/position_codecs.h"
#include "codec/value_packing.h"

namespace weightcast {
namespace {

void put_chunk_header(std::vector<uint8_t>* out, ChunkMode mode, unsigned value_bits,
                      unsigned rice_k, uint32_t changed, size_t positions_bytes) {
  out->push_back(static_cast<uint8_t>(mode));
  out->push_back(static_cast<uint8_t>(value_bits));
  out->push_back(static_cast<uint8_t>(rice_k));
  out->push_back(0);
  append_le<uint32_t>(out, changed);
  append_le<uint32_t>(out, static_cast<uint32_t>(positions_bytes));
}

// The chunk's bytes from its n changed positions (scratch.positions) and their values
// (scratch.values, already computed): the same for encode_chunk and encode_scanned_chunk.
void encode_changes(const uint8_t* new_bytes, uint32_t length, size_t es, uint32_t n,
                    uint32_t allowed_modes, ChunkScratch& scratch, EncodedChunk* out) {
  const std::span<const uint32_t> positions(scratch.positions.data(), n);
  const auto w = static_cast<unsigned>(es * 8);
  const ValuePackingPlan vplan = plan_value_packing(scratch.values, w);
  const RicePlan rice = plan_rice_gaps(positions);
  struct Candidate {
    ChunkMode mode;
    uint32_t mask;
    size_t positions_bytes;
    bool has_values;
  };
  const Candidate candidates[] = {
      {ChunkMode::kGapsRice, kAllowRice, rice.bytes, true},
      // Stream VByte needs at least 10 bits per gap; size it only when that could win.
      {ChunkMode::kGapsStreamVByte, kAllowStreamVByte,
       (allowed_modes & kAllowRice) != 0 && rice.bytes <= size_t{n} + n / 4
           ? SIZE_MAX / 2
           : streamvbyte_gaps_size(positions),
       true},
      {ChunkMode::kBitmap, kAllowBitmap, bitmap_size(length), true},
      {ChunkMode::kRaw, kAllowRaw, size_t{length} * es, false},
  };
  const Candidate* best = nullptr;
  size_t best_bytes = SIZE_MAX;
  for (const auto& c : candidates) {
    if ((allowed_modes & c.mask) == 0) continue;
    const size_t total = c.positions_bytes + (c.has_values ? vplan.bytes : 0);
    if (total < best_bytes) {
      best = &c;
      best_bytes = total;
    }
  }
  if (best == nullptr) best = &candidates[0];  // an empty mask means "any"
  out->mode = best->mode;
  out->bytes.reserve(kChunkHeaderBytes + best_bytes);
  put_chunk_header(&out->bytes, best->mode, best->has_values ? vplan.bits : 0,
                   best->mode == ChunkMode::kGapsRice ? rice.k : 0, n, best->positions_bytes);
  switch (best->mode) {
    case ChunkMode::kGapsRice:
      encode_rice_gaps(positions, rice.k, &out->bytes);
      break;
    case ChunkMode::kGapsStreamVByte:
      encode_streamvbyte_gaps(positions, &out->bytes);
      break;
    case ChunkMode::kBitmap:
      encode_bitmap(positions, length, &out->bytes);
      break;
    case ChunkMode::kRaw:
    case ChunkMode::kUnchanged:
      out->bytes.insert(out->bytes.end(), new_bytes, new_bytes + size_t{length} * es);
      break;
  }
  if (best->has_values) pack_values(scratch.values, w, vplan, &out->bytes);
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

Status decode_chunk(std::span<const uint8_t> bytes, uint32_t length, size_t es, DecodedChunk* out,
                    const char* where) {
  ByteCursor cur(bytes);
  uint8_t mode = 0, value_bits = 0, rice_k = 0, reserved = 0;
  uint32_t changed = 0, positions_bytes = 0;
  if (!cur.read(&mode) || !cur.read(&value_bits) || !cur.read(&rice_k) || !cur.read(&reserved) ||
      !cur.read(&changed) || !cur.read(&positions_bytes)) {
    return data_loss(std::string(where) + ": chunk of " + std::to_string(bytes.size()) +
                     " bytes is shorter than its 12-byte header");
  }
  if (mode == 0 || mode > kMaxChunkMode || reserved != 0) {
    return data_loss(std::string(where) + ": unknown chunk mode " + std::to_string(mode) +
                     " or reserved byte " + std::to_string(reserved));
  }
  if (changed == 0 || changed > length) {
    return data_loss(std::string(where) + ": claims " + std::to_string(changed) +
                     " changes in a chunk of " + std::to_string(length) + " elements");
  }
  std::span<const uint8_t> positions;
  if (!cur.take(positions_bytes, &positions)) {
    return data_loss(std::string(where) + ": positions section of " +
                     std::to_string(positions_bytes) + " bytes runs past the chunk end");
  }
  out->mode = static_cast<ChunkMode>(mode);
  out->changed = changed;
  const auto w = static_cast<unsigned>(es * 8);
  if (out->mode == ChunkMode::kRaw) {
    if (positions_bytes != size_t{length} * es || cur.remaining() != 0 || value_bits != 0 ||
        rice_k != 0) {
      return data_loss(std::string(where) + ": raw chunk of " + std::to_string(bytes.size()) +
                       " bytes for " + std::to_string(length) + " elements");
    }
    out->raw = positions;
    out->positions.clear();
    out->values.clear();
    return ok_status();
  }
  if (out->mode != ChunkMode::kGapsRice && rice_k != 0) {
    return data_loss(std::string(where) + ": Rice parameter set on a " +
                     chunk_mode_name(out->mode) + " chunk");
  }
  Status s;
  switch (out->mode) {
    case ChunkMode::kGapsStreamVByte:
      s = decode_streamvbyte_gaps(positions, changed, length, &out->positions, where);
      break;
    case ChunkMode::kGapsRice:
      s = decode_rice_gaps(positions, changed, rice_k, length, &out->positions, where);
      break;
    default:
      s = decode_bitmap(positions, changed, length, &out->positions, where);
      break;
  }
  RETURN_IF_ERROR(s);
  std::span<const uint8_t> values;
  (void)cur.take(cur.remaining(), &values);
  return unpack_values(values, changed, value_bits, w, &out->values, where);
}

}  // namespace weightcast
