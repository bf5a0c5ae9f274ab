#include "codec/value_packing.h"

#include <string>

#include "codec/base/byte_io.h"
#include "codec/bit_stream.h"

namespace weightcast {
namespace {

size_t bytes_for_bits(uint64_t bits) {
  return static_cast<size_t>((bits + 7) / 8);
}

unsigned bit_length(uint32_t v) {
  return v == 0 ? 0u : 32u - static_cast<unsigned>(__builtin_clz(v));
}

size_t section_bytes(uint64_t n, unsigned bits, uint64_t exceptions, unsigned iw, unsigned w) {
  return 4 + bytes_for_bits(n * bits) + bytes_for_bits(exceptions * iw) +
         bytes_for_bits(exceptions * (w - bits));
}

}  // namespace

ValuePackingPlan plan_value_packing(std::span<const uint32_t> values, unsigned w) {
  uint32_t hist[33] = {};
  for (uint32_t v : values) ++hist[bit_length(v)];
  const auto n = static_cast<uint32_t>(values.size());
  const unsigned iw = index_bits(n);
  ValuePackingPlan best;
  best.bytes = SIZE_MAX;
  uint32_t wider = n - hist[0];  // values with bit_length > b, for b = 0
  for (unsigned b = 0; b <= w; ++b) {
    const size_t bytes = section_bytes(n, b, wider, iw, w);
    if (bytes < best.bytes) best = {b, wider, bytes};
    if (b < w) wider -= hist[b + 1];
  }
  return best;
}

void pack_values(std::span<const uint32_t> values, unsigned w, const ValuePackingPlan& plan,
                 std::vector<uint8_t>* out) {
  append_le<uint32_t>(out, plan.exceptions);
  const unsigned b = plan.bits;
  const uint32_t low_mask = BitWriter::mask(b);
  const uint64_t n = values.size();
  thread_local std::vector<uint32_t> exception_index;
  exception_index.clear();
  {
    BitWriter low(out, n * b);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t v = values[i];
      low.put(v & low_mask, b);
      if (v > low_mask) exception_index.push_back(i);
    }
  }
  if (plan.exceptions == 0) return;
  const unsigned iw = index_bits(static_cast<uint32_t>(n));
  {
    BitWriter idx(out, uint64_t{plan.exceptions} * iw);
    for (uint32_t i : exception_index) idx.put(i, iw);
  }
  BitWriter high(out, uint64_t{plan.exceptions} * (w - b));
  for (uint32_t i : exception_index) high.put(values[i] >> b, w - b);  // b < w here
}

Status unpack_values(std::span<const uint8_t> section, uint32_t count, unsigned bits, unsigned w,
                     std::vector<uint32_t>* values, const char* where) {
  auto fail = [&](const std::string& what) {
    return data_loss(std::string(where) + ": values section " + what);
  };
  if (bits > w)
    return fail("width " + std::to_string(bits) + " exceeds element width " + std::to_string(w));
  ByteCursor cur(section);
  uint32_t exceptions = 0;
  if (!cur.read(&exceptions)) return fail("truncated before its exception count");
  if (exceptions > count || (bits == w && exceptions != 0)) {
    return fail("claims " + std::to_string(exceptions) + " exceptions for " +
                std::to_string(count) + " values of width " + std::to_string(bits));
  }
  const unsigned iw = index_bits(count);
  const size_t low_bytes = bytes_for_bits(uint64_t{count} * bits);
  const size_t idx_bytes = bytes_for_bits(uint64_t{exceptions} * iw);
  const size_t high_bytes = bytes_for_bits(uint64_t{exceptions} * (w - bits));
  if (cur.remaining() != low_bytes + idx_bytes + high_bytes) {
    return fail("holds " + std::to_string(cur.remaining()) + " bytes where " +
                std::to_string(count) + " values need " +
                std::to_string(low_bytes + idx_bytes + high_bytes));
  }
  values->resize(count);
  const uint8_t* base = section.data() + 4;
  BitReader low(base, low_bytes);
  for (uint32_t i = 0; i < count; ++i) (*values)[i] = low.get(bits);
  BitReader idx(base + low_bytes, idx_bytes);
  BitReader high(base + low_bytes + idx_bytes, high_bytes);
  int64_t previous = -1;
  for (uint32_t e = 0; e < exceptions; ++e) {
    const uint32_t i = idx.get(iw);
    if (static_cast<int64_t>(i) <= previous || i >= count) {
      return fail("exception index " + std::to_string(i) + " is out of order or beyond " +
                  std::to_string(count) + " values");
    }
    previous = i;
    const uint32_t hi = high.get(w - bits);
    if (hi == 0) return fail("exception " + std::to_string(e) + " has no high bits");
    (*values)[i] |= hi << bits;  // bits < w <= 32 here since exceptions exist
  }
  if (low.overrun() || idx.overrun() || high.overrun()) return fail("is truncated");
  const uint32_t limit = max_value(w);
  for (uint32_t i = 0; i < count; ++i) {
    if ((*values)[i] > limit) {
      return fail("value " + std::to_string((*values)[i]) + " at " + std::to_string(i) +
                  " exceeds the largest " + std::to_string(w) + "-bit difference");
    }
  }
  return ok_status();
}

}  // namespace weightcast
