// libFuzzer target: decompress a compressed delta part (codec/part_compression.h) under a
// 1 MiB limit. The invariants checked on every input: a refusal carries a message and is
// kOutOfRange exactly when the declared raw_bytes is over the limit, kDataLoss otherwise;
// whatever decodes has exactly the declared raw_bytes, is refused under a limit one byte
// smaller, and compresses again (same plane width) into a part that decodes to the same
// bytes. Anything else, or a crash, aborts.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/part_compression.h"
#include "tests/fuzz/fuzz_reach.h"
#include "tests/fuzz/part_compression_fuzz_seeds.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kBadHeader, kRefused, kDecoded };
}  // namespace

std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused by the header (size, magic, plane width)", 5},
      {"refused past the header (limit, zstd frame, planes)", 25},
      {"decoded and compressed again", 2},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::span<const uint8_t> input(data, size);
  const uint64_t limit = fuzzing::kPartFuzzMaxRawBytes;
  auto decoded = decompress_part(input, limit);

  // The header fields, when there is a well-formed header to read them from.
  const bool has_header = size >= kPartCompressionHeaderBytes &&
                          std::memcmp(data, kPartCompressionMagic, 4) == 0 &&
                          (data[4] == 1 || data[4] == 2 || data[4] == 4 || data[4] == 8);
  const uint64_t declared = has_header ? load_le<uint64_t>(data + 5) : 0;
  if (!decoded.ok()) {
    const Status& s = decoded.status();
    if (s.message().empty()) std::abort();
    const bool over = has_header && declared > limit;
    if (s.code() != (over ? StatusCode::kOutOfRange : StatusCode::kDataLoss)) std::abort();
    fuzzing::fuzz_reached(has_header ? fuzzing::kRefused : fuzzing::kBadHeader);
    return 0;
  }
  if (!has_header || decoded->size() != declared) std::abort();
  if (declared > 0 &&
      decompress_part(input, declared - 1).status().code() != StatusCode::kOutOfRange) {
    std::abort();
  }

  auto again = compress_part(*decoded, {1, data[4]});
  if (!again.ok()) std::abort();
  auto back = decompress_part(*again, declared);
  if (!back.ok() || *back != *decoded) std::abort();
  fuzzing::fuzz_reached(fuzzing::kDecoded);
  return 0;
}
