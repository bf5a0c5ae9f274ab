// libFuzzer target: parse a torch.save artifact (CRC checks off). The invariants checked on every
// input: a parse either fails with a message, or yields storages that lie inside the input (every
// byte is read to prove it) and tensor views that lie inside their storages (re-checked here with
// 128-bit arithmetic, independently of the parser); whatever parses is rewritten by
// write_torch_artifact into a file that parses to the same storages and tensors, and rewriting
// that gives identical bytes. Anything else, or a crash, aborts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/formats/torch_artifact.h"
#include "codec/formats/zip_archive.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kZipRefused, kRefused, kNameTooLong, kParsed };
}  // namespace

// The zip container is the first check; the zip target fuzzes it on its own.
std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused by the zip container (CRCs unchecked)", 20},
      {"refused by the records, the pickle or the storages", 2},
      {"parsed, but the archive name is too long to rewrite", 0},
      {"parsed and rewritten", 1.5},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

using weightcast::TorchArtifact;

void check_views(const TorchArtifact& a, const uint8_t* data, size_t size) {
  uint64_t sum = 0;
  for (const auto& s : a.storages) {
    if (!s.bytes.empty() &&
        (s.bytes.data() < data || s.bytes.data() + s.bytes.size() > data + size))
      std::abort();
    if (s.bytes.size() % weightcast::dtype_size(s.dtype) != 0) std::abort();
    for (const uint8_t b : s.bytes) sum += b;
  }
  volatile uint64_t sink = sum;
  (void)sink;
  for (const auto& t : a.tensors) {
    if (t.storage >= a.storages.size() || t.shape.size() != t.stride.size() || t.storage_offset < 0)
      std::abort();
    const auto& s = a.storages[t.storage];
    const __int128 numel = s.bytes.size() / weightcast::dtype_size(s.dtype);
    __int128 last = t.storage_offset;
    bool empty = false;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0 || t.stride[d] < 0) std::abort();
      empty = empty || t.shape[d] == 0;
      if (t.shape[d] > 0) last += static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
    }
    if (empty ? t.storage_offset > numel : last >= numel) std::abort();
  }
}

std::vector<uint8_t> rewrite(const TorchArtifact& a) {
  std::vector<uint8_t> out;
  const auto s = weightcast::write_torch_artifact(
      a.archive_name, a.storages, a.tensors, [&](std::span<const uint8_t> piece) {
        out.insert(out.end(), piece.begin(), piece.end());
        return weightcast::ok_status();
      });
  if (!s.ok()) std::abort();
  return out;
}

bool same(const TorchArtifact& a, const TorchArtifact& b) {
  if (a.archive_name != b.archive_name || a.storages.size() != b.storages.size() ||
      a.tensors.size() != b.tensors.size())
    return false;
  for (size_t i = 0; i < a.storages.size(); ++i) {
    const auto &x = a.storages[i], &y = b.storages[i];
    if (x.key != y.key || x.dtype != y.dtype ||
        !std::equal(x.bytes.begin(), x.bytes.end(), y.bytes.begin(), y.bytes.end()))
      return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.storage != y.storage || x.storage_offset != y.storage_offset ||
        x.shape != y.shape || x.stride != y.stride)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  // CRCs unchecked, to reach the pickle and storage checks behind them (the zip target covers
  // CRC verification); the rewritten file is parsed with them checked.
  TorchReadOptions options;
  options.zip.verify_crc = false;
  auto parsed = parse_torch_artifact(std::span(data, size), options);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    fuzzing::fuzz_reached(parse_zip(std::span(data, size), options.zip).ok()
                              ? fuzzing::kRefused
                              : fuzzing::kZipRefused);
    return 0;
  }
  check_views(*parsed, data, size);
  if (parsed->archive_name.size() > 255) {  // the writer's limit is stricter
    fuzzing::fuzz_reached(fuzzing::kNameTooLong);
    return 0;
  }
  const std::vector<uint8_t> first = rewrite(*parsed);
  auto again = parse_torch_artifact(first);
  if (!again.ok() || !same(*parsed, *again)) std::abort();
  if (rewrite(*again) != first) std::abort();
  fuzzing::fuzz_reached(fuzzing::kParsed);
  return 0;
}
