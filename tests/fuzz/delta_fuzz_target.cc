// libFuzzer target: parse a delta record (hash check off, to reach the structure behind it)
// and apply it. The invariant checked on every input: an apply either fails and leaves the
// destination byte-identical, or succeeds and the destination's real checksum moved by exactly
// target - base. Anything else, or a crash/overrun, aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_format.h"
#include "tests/fuzz/delta_fuzz_seeds.h"

namespace weightcast::fuzzing {
DeltaFuzzCounts delta_fuzz_counts;
}  // namespace weightcast::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  ParseOptions po;
  po.verify_hash = false;
  auto rec = parse_delta_record(std::span(data, size), po);
  if (!rec.ok()) return 0;
  ++fuzzing::delta_fuzz_counts.parsed;
  const DeltaRecordHeader& h = rec->header;
  const size_t es = dtype_size(h.dtype);
  if (h.range_elements * es > (size_t{1} << 22)) return 0;  // keep each run small
  std::vector<uint8_t> dest(h.range_elements * es);
  for (size_t i = 0; i < dest.size(); ++i) dest[i] = fuzzing::fuzz_base_byte(i);
  const std::vector<uint8_t> before = dest;
  const uint64_t real_base = checksum_range(dest.data(), es, h.range_elements, h.range_offset);
  ApplyOptions o;
  o.current_checksum = h.base_checksum;  // pretend it matches, to reach the chunk decoders
  const TensorRef view =
      TensorRef::contiguous("fuzz", h.dtype, dest.data(), static_cast<int64_t>(h.range_elements));
  auto r = apply_delta(*rec, view, o);
  if (!r.ok()) {
    if (dest != before) std::abort();  // a failed apply changed memory
    ++fuzzing::delta_fuzz_counts.apply_refused;
    return 0;
  }
  const uint64_t real_now = checksum_range(dest.data(), es, h.range_elements, h.range_offset);
  if (real_now - real_base != h.target_checksum - h.base_checksum) std::abort();
  ++fuzzing::delta_fuzz_counts.applied;
  return 0;
}

namespace weightcast::fuzzing {

// The smoke run must reach both outcomes of apply, or it proved little.
int check_delta_fuzz_coverage(size_t seeds) {
  const auto& c = delta_fuzz_counts;
  std::printf(
      "delta fuzz: %llu parsed, %llu applied and verified, %llu refused with memory "
      "unchanged\n",
      static_cast<unsigned long long>(c.parsed), static_cast<unsigned long long>(c.applied),
      static_cast<unsigned long long>(c.apply_refused));
  if (c.applied < seeds || c.apply_refused == 0) {
    std::fprintf(stderr, "delta fuzz: inputs did not reach apply's success and failure paths\n");
    return 1;
  }
  return 0;
}

}  // namespace weightcast::fuzzing
