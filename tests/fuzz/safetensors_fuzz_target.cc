// libFuzzer target: parse a safetensors file. The invariants checked on every input: a parse
// either fails with a message, or yields views that lie inside the input (every byte is read
// to prove it); whatever parses is re-serialised by plan_safetensors/write_safetensors into a
// file that parses to the same metadata and tensors (names, dtypes, shapes, bytes), and
// serialising that file again gives identical bytes. Anything else, or a crash, aborts.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/formats/safetensors_format.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kBadLength, kRefused, kParsed };
}  // namespace

std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused by the 8-byte header length", 10},
      {"refused by the JSON header or the data ranges", 15},
      {"parsed and re-serialised", 0.5},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

// Our writer's bytes for a parsed file; aborts if it refuses what the reader accepted.
std::vector<uint8_t> reserialise(const weightcast::SafetensorsFile& f) {
  using namespace weightcast;
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& t : f.tensors) specs.push_back({t.name, t.dtype, t.shape});
  auto layout = plan_safetensors(specs, f.metadata);
  if (!layout.ok()) std::abort();
  std::vector<uint8_t> out;
  const Status s = write_safetensors(*layout, f.tensors, [&](std::span<const uint8_t> piece) {
    out.insert(out.end(), piece.begin(), piece.end());
    return ok_status();
  });
  if (!s.ok() || out.size() != layout->file_size || layout->data_offset % 8 != 0) std::abort();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::span<const uint8_t> input(data, size);
  auto parsed = parse_safetensors(input);
  // The header-only entry point streaming readers use must agree.
  if (parse_safetensors_header(input, size).ok() != parsed.ok()) std::abort();
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    fuzzing::fuzz_reached(read_safetensors_header_length(input, size).ok() ? fuzzing::kRefused
                                                                           : fuzzing::kBadLength);
    return 0;
  }

  uint64_t sum = 0;
  for (const auto& t : parsed->tensors) {
    if (!t.bytes.empty() &&
        (t.bytes.data() < data || t.bytes.data() + t.bytes.size() > data + size))
      std::abort();
    for (const uint8_t b : t.bytes) sum += b;
  }
  volatile uint64_t sink = sum;
  (void)sink;

  const std::vector<uint8_t> again = reserialise(*parsed);
  auto reparsed = parse_safetensors(again);
  if (!reparsed.ok() || reparsed->metadata != parsed->metadata ||
      reparsed->tensors.size() != parsed->tensors.size()) {
    std::abort();
  }
  for (const auto& t : parsed->tensors) {
    const TensorBytesView* r = reparsed->find(t.name);
    if (r == nullptr || r->dtype != t.dtype || r->shape != t.shape ||
        !std::equal(r->bytes.begin(), r->bytes.end(), t.bytes.begin(), t.bytes.end())) {
      std::abort();
    }
  }
  if (reserialise(*reparsed) != again) std::abort();  // our output is a fixed point
  fuzzing::fuzz_reached(fuzzing::kParsed);
  return 0;
}
