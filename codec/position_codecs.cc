#include "codec/position_codecs.h"

#include <streamvbyte.h>

#include <string>

#include "codec/bit_stream.h"
#include "codec/delta_format.h"

namespace weightcast {
namespace {

Status fail(const char* where, const std::string& what) {
  return data_loss(std::string(where) + ": positions " + what);
}

template <typename F>
void for_each_gap(std::span<const uint32_t> positions, F&& f) {
  uint32_t next = 0;  // p_{k-1} + 1
  for (uint32_t p : positions) {
    f(p - next);
    next = p + 1;
  }
}

// streamvbyte_decode may read past its input with SIMD loads, so it gets a padded copy.
constexpr size_t kStreamVByteSlack = 64;

}  // namespace

size_t streamvbyte_gaps_size(std::span<const uint32_t> positions) {
  size_t bytes = (positions.size() + 3) / 4;
  for_each_gap(positions, [&](uint32_t g) {
    bytes += g < (1u << 8) ? 1 : g < (1u << 16) ? 2 : g < (1u << 24) ? 3 : 4;
  });
  return bytes;
}

void encode_streamvbyte_gaps(std::span<const uint32_t> positions, std::vector<uint8_t>* out) {
  std::vector<uint32_t> gaps;
  gaps.reserve(positions.size());
  for_each_gap(positions, [&](uint32_t g) { gaps.push_back(g); });
  const size_t at = out->size();
  out->resize(at + streamvbyte_max_compressedbytes(static_cast<uint32_t>(gaps.size())));
  const size_t used =
      streamvbyte_encode(gaps.data(), static_cast<uint32_t>(gaps.size()), out->data() + at);
  out->resize(at + used);
}

Status decode_streamvbyte_gaps(std::span<const uint8_t> section, uint32_t count, uint32_t limit,
                               std::vector<uint32_t>* positions, const char* where) {
  const size_t control = (size_t{count} + 3) / 4;
  if (section.size() < control) return fail(where, "Stream VByte control bytes are truncated");
  size_t data = 0;
  for (uint32_t i = 0; i < count; ++i) data += ((section[i / 4] >> (2 * (i % 4))) & 3u) + 1;
  if (section.size() != control + data) {
    return fail(where, "Stream VByte section holds " + std::to_string(section.size()) +
                           " bytes where its control bytes describe " +
                           std::to_string(control + data));
  }
  std::vector<uint8_t> padded(section.size() + kStreamVByteSlack, 0);
  std::copy(section.begin(), section.end(), padded.begin());
  positions->resize(count);
  streamvbyte_decode(padded.data(), positions->data(), count);
  uint64_t next = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t p = next + (*positions)[i];
    if (p >= limit)
      return fail(
          where, "gap " + std::to_string(i) + " leads past the chunk end " + std::to_string(limit));
    (*positions)[i] = static_cast<uint32_t>(p);
    next = p + 1;
  }
  return ok_status();
}

RicePlan plan_rice_gaps(std::span<const uint32_t> positions) {
  const auto n = static_cast<uint64_t>(positions.size());
  if (n == 0) return {0, 0};
  const uint64_t gap_sum = positions.back() + 1 - n;
  const uint64_t mean = gap_sum / n;
  const unsigned k0 = mean == 0 ? 0 : 63u - static_cast<unsigned>(__builtin_clzll(mean));
  // The optimum lies next to log2(mean gap); the three candidates are sized in one pass.
  const unsigned lo = std::min(k0 == 0 ? 0u : k0 - 1, kMaxRiceK - 2);
  uint64_t q[3] = {0, 0, 0};
  for_each_gap(positions, [&](uint32_t g) {
    q[0] += g >> lo;
    q[1] += g >> (lo + 1);
    q[2] += g >> (lo + 2);
  });
  RicePlan best{0, SIZE_MAX};
  for (unsigned i = 0; i < 3; ++i) {
    const size_t bytes = static_cast<size_t>((q[i] + n * (lo + i + 1) + 7) / 8);
    if (bytes < best.bytes) best = {lo + i, bytes};
  }
  return best;
}

void encode_rice_gaps(std::span<const uint32_t> positions, unsigned k, std::vector<uint8_t>* out) {
  uint64_t bits = positions.size() * (uint64_t{k} + 1);
  for_each_gap(positions, [&](uint32_t g) { bits += g >> k; });
  BitWriter w(out, bits);
  const uint32_t low_mask = BitWriter::mask(k);
  // A plain loop (no lambda capturing the writer) lets the compiler keep its state in registers.
  uint32_t next = 0;
  for (const uint32_t p : positions) {
    const uint32_t g = p - next;
    next = p + 1;
    const uint32_t q = g >> k;
    if (q + 1 + k < 32) [[likely]] {  // one put for the whole code
      w.put(((1u << q) - 1) | ((g & low_mask) << (q + 1)), q + 1 + k);
    } else {
      w.put_unary(q);
      w.put(g & low_mask, k);
    }
  }
}

Status decode_rice_gaps(std::span<const uint8_t> section, uint32_t count, unsigned k,
                        uint32_t limit, std::vector<uint32_t>* positions, const char* where) {
  if (k > kMaxRiceK)
    return fail(where,
                "Rice parameter " + std::to_string(k) + " exceeds " + std::to_string(kMaxRiceK));
  BitReader r(section);
  positions->resize(count);
  uint64_t next = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t q = r.get_unary(limit);
    const uint64_t g = (q << k) | r.get(k);
    if (r.overrun()) return fail(where, "Rice codes are truncated at gap " + std::to_string(i));
    const uint64_t p = next + g;
    if (q > limit || p >= limit) {
      return fail(
          where, "gap " + std::to_string(i) + " leads past the chunk end " + std::to_string(limit));
    }
    (*positions)[i] = static_cast<uint32_t>(p);
    next = p + 1;
  }
  if (r.bytes_consumed() != section.size()) {
    return fail(where, "Rice section has " + std::to_string(section.size() - r.bytes_consumed()) +
                           " unused bytes");
  }
  return ok_status();
}

void encode_bitmap(std::span<const uint32_t> positions, uint32_t chunk_length,
                   std::vector<uint8_t>* out) {
  const size_t at = out->size();
  out->resize(at + bitmap_size(chunk_length), 0);
  uint8_t* bits = out->data() + at;
  for (uint32_t p : positions) bits[p / 8] |= static_cast<uint8_t>(1u << (p % 8));
}

Status decode_bitmap(std::span<const uint8_t> section, uint32_t count, uint32_t chunk_length,
                     std::vector<uint32_t>* positions, const char* where) {
  if (section.size() != bitmap_size(chunk_length)) {
    return fail(where, "bitmap of " + std::to_string(section.size()) + " bytes for a chunk of " +
                           std::to_string(chunk_length) + " elements");
  }
  positions->clear();
  positions->reserve(count);
  for (size_t byte = 0; byte < section.size(); ++byte) {
    uint32_t b = section[byte];
    while (b != 0) {
      const auto p = static_cast<uint32_t>(byte * 8 + static_cast<unsigned>(__builtin_ctz(b)));
      if (p >= chunk_length)
        return fail(where, "bitmap marks position " + std::to_string(p) + " beyond the chunk");
      if (positions->size() == count)
        return fail(where, "bitmap marks more than the " + std::to_string(count) +
                               " changes the chunk claims");
      positions->push_back(p);
      b &= b - 1;
    }
  }
  if (positions->size() != count) {
    return fail(where, "bitmap marks " + std::to_string(positions->size()) +
                           " positions, the chunk claims " + std::to_string(count));
  }
  return ok_status();
}

}  // namespace weightcast
