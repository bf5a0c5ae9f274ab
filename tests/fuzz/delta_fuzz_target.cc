// libFuzzer target: parse a delta record (hash check off, to reach the structure behind it)
// and apply it. The invariant checked on every input: an apply either fails and leaves the
// destination byte-identical, or succeeds and the destination's real checksum moved by exactly
// target - base. Anything else, or a crash/overrun, aborts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_format.h"
#include "tests/fuzz/delta_fuzz_seeds.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kBadMagic, kParseRefused, kTooLarge, kApplyRefused, kApplied };
}  // namespace

// A smoke run must reach both outcomes of apply, not only the parser's refusals.
std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused by the magic or the format version (or too short)", 2},
      {"refused by the rest of the record's parse", 20},
      {"parsed, but too large to apply here", 0},
      {"refused by apply, memory unchanged", 5},
      {"applied, and the checksum moved by target - base", 0.5},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  using namespace weightcast::fuzzing;
  ParseOptions po;
  po.verify_hash = false;
  auto rec = parse_delta_record(std::span(data, size), po);
  if (!rec.ok()) {
    // The parser's first check: the fixed header's first 16 bytes are there (it reads them at
    // once) and start with the magic and the version.
    const bool past_magic = size >= 16 && load_le<uint32_t>(data) == kDeltaRecordMagic &&
                            load_le<uint16_t>(data + 4) == kDeltaFormatVersion;
    fuzz_reached(past_magic ? kParseRefused : kBadMagic);
    return 0;
  }
  const DeltaRecordHeader& h = rec->header;
  const size_t es = dtype_size(h.dtype);
  if (h.range_elements * es > (size_t{1} << 22)) {  // keep each run small
    fuzz_reached(kTooLarge);
    return 0;
  }
  std::vector<uint8_t> dest(h.range_elements * es);
  for (size_t i = 0; i < dest.size(); ++i) dest[i] = fuzz_base_byte(i);
  const std::vector<uint8_t> before = dest;
  const uint64_t real_base = checksum_range(dest.data(), es, h.range_elements, h.range_offset);
  ApplyOptions o;
  o.current_checksum = h.base_checksum;  // pretend it matches, to reach the chunk decoders
  const TensorRef view =
      TensorRef::contiguous("fuzz", h.dtype, dest.data(), static_cast<int64_t>(h.range_elements));
  auto r = apply_delta(*rec, view, o);
  if (!r.ok()) {
    if (dest != before) std::abort();  // a failed apply changed memory
    fuzz_reached(kApplyRefused);
    return 0;
  }
  const uint64_t real_now = checksum_range(dest.data(), es, h.range_elements, h.range_offset);
  if (real_now - real_base != h.target_checksum - h.base_checksum) std::abort();
  fuzz_reached(kApplied);
  return 0;
}
