// libFuzzer target: parse a ZIP file. The invariants checked on every input: a parse either
// fails with a message, or yields entries whose data lies inside the input (every byte is
// read to prove it); parsing with CRC checks deferred agrees with parsing with them once each
// entry's CRC is verified; and whatever parses is rewritten by ZipWriter into an archive
// that parses to the same names and bytes. Anything else, or a crash, aborts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/formats/zip_archive.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kNoEndRecord, kRefused, kCrcRefused, kParsed };
}  // namespace

std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"no end of central directory record", 10},
      {"refused by the directory or the entries", 15},
      {"refused by an entry's CRC-32 alone", 1},
      {"parsed and rewritten", 1},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

// The reader's first check, independently: an end of central directory record (signature
// "PK\5\6") in the last 22 + 65535 bytes whose comment length reaches exactly the file's end.
bool has_end_record(const uint8_t* data, size_t size) {
  constexpr size_t kEndBytes = 22;
  if (size < kEndBytes) return false;
  const size_t lowest = size - kEndBytes > 0xFFFF ? size - kEndBytes - 0xFFFF : 0;
  for (size_t pos = size - kEndBytes;; --pos) {
    if (weightcast::load_le<uint32_t>(data + pos) == 0x06054b50 &&
        pos + kEndBytes + weightcast::load_le<uint16_t>(data + pos + 20) == size) {
      return true;
    }
    if (pos == lowest) return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::span<const uint8_t> input(data, size);
  auto parsed = parse_zip(input);
  ZipLimits deferred;
  deferred.verify_crc = false;
  auto unchecked = parse_zip(input, deferred);
  bool crcs_ok = unchecked.ok();
  if (unchecked.ok()) {
    for (const ZipEntry& e : unchecked->entries) crcs_ok = crcs_ok && verify_zip_entry_crc(e).ok();
  }
  if (parsed.ok() != crcs_ok) std::abort();
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    fuzzing::fuzz_reached(unchecked.ok()               ? fuzzing::kCrcRefused
                          : has_end_record(data, size) ? fuzzing::kRefused
                                                       : fuzzing::kNoEndRecord);
    return 0;
  }

  uint64_t sum = 0;
  std::vector<uint8_t> out;
  ZipWriter writer([&](std::span<const uint8_t> piece) {
    out.insert(out.end(), piece.begin(), piece.end());
    return ok_status();
  });
  for (const ZipEntry& e : parsed->entries) {
    if (!e.data.empty() && (e.data.data() < data || e.data.data() + e.data.size() > data + size ||
                            e.data.data() != data + e.data_offset)) {
      std::abort();
    }
    for (const uint8_t b : e.data) sum += b;
    if (!writer.add_stored(e.name, e.data).ok()) std::abort();
  }
  volatile uint64_t sink = sum;
  (void)sink;
  if (!writer.finish().ok()) std::abort();
  auto again = parse_zip(out);
  if (!again.ok() || again->entries.size() != parsed->entries.size()) std::abort();
  for (size_t i = 0; i < parsed->entries.size(); ++i) {
    const ZipEntry& a = parsed->entries[i];
    const ZipEntry& b = again->entries[i];
    if (a.name != b.name || a.crc32 != b.crc32 || b.data_offset % 64 != 0 ||
        !std::equal(a.data.begin(), a.data.end(), b.data.begin(), b.data.end())) {
      std::abort();
    }
  }
  fuzzing::fuzz_reached(fuzzing::kParsed);
  return 0;
}
