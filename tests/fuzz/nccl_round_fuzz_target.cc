// libFuzzer target: the NCCL round's framing (transport/nccl/broadcast_round.h), the bytes a
// receiver parses before it allocates anything: a 32-byte header, then the descriptor.
// Invariants: a refusal carries a message; an accepted header or descriptor is within the
// limits and encodes back to the very bytes it was parsed from (the format has no slack).
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "tests/fuzz/fuzz_reach.h"
#include "transport/nccl/broadcast_round.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kBadHeader, kBadDescriptor, kAccepted };
}  // namespace

// A receiver reads the header first and the descriptor only when the header is good, so an
// input is as deep as the header lets it go; the descriptor of an input with a bad header is
// parsed all the same, but that input ends at depth 0.
std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused by the header (size, magic, format, descriptor size)", 10},
      {"header accepted, descriptor refused", 10},
      {"header and descriptor accepted, both re-encode to their bytes", 3},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  using namespace weightcast::nccl;
  RoundLimits limits;
  limits.max_parts = 64;
  limits.max_name_bytes = 256;
  limits.max_descriptor_bytes = 1 << 16;
  limits.max_total_bytes = uint64_t{1} << 32;
  const std::span<const uint8_t> input(data, size);
  bool header_ok = false;
  if (size >= kRoundHeaderBytes) {
    auto header = parse_round_header(input.first(kRoundHeaderBytes), limits);
    header_ok = header.ok();
    if (!header.ok()) {
      if (header.status().message().empty()) std::abort();
    } else {
      if (header->descriptor_bytes > limits.max_descriptor_bytes) std::abort();
      const auto again = encode_round_header(*header);
      if (std::memcmp(again.data(), data, kRoundHeaderBytes) != 0) std::abort();
    }
  }
  const std::span<const uint8_t> descriptor =
      size >= kRoundHeaderBytes ? input.subspan(kRoundHeaderBytes) : input;
  auto parts = parse_round_descriptor(descriptor, limits);
  if (!parts.ok()) {
    if (parts.status().message().empty()) std::abort();
    fuzzing::fuzz_reached(header_ok ? fuzzing::kBadDescriptor : fuzzing::kBadHeader);
    return 0;
  }
  if (parts->size() > limits.max_parts) std::abort();
  uint64_t total = 0;
  for (const PartDescriptor& p : *parts) {
    if (p.name.size() > limits.max_name_bytes) std::abort();
    total += p.bytes;
    if (total > limits.max_total_bytes) std::abort();
  }
  auto again = encode_round_descriptor(*parts, limits);
  if (!again.ok() || again->size() != descriptor.size() ||
      !std::equal(again->begin(), again->end(), descriptor.begin())) {
    std::abort();
  }
  fuzzing::fuzz_reached(header_ok ? fuzzing::kAccepted : fuzzing::kBadHeader);
  return 0;
}
