// libFuzzer target: decode a UCX version blob (transport/ucx/ucx_version_blob.h), the bytes a
// subscriber receives from the store or an Offer. Invariants: a refusal carries a message; an
// accepted blob is within the limits and encodes back to bytes that decode to the same blob.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "tests/fuzz/fuzz_reach.h"
#include "transport/ucx/ucx_version_blob.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kBadMagic, kRefused, kAccepted };
}  // namespace

std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"refused by the magic or the format", 4},
      {"refused past them (address, segment, parts)", 20},
      {"decoded, and encoded back to the same blob", 5},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

// The decoder's first check: the 8 bytes every blob of this format starts with (magic and
// format), taken from an encoded blob rather than restated here.
bool has_blob_prefix(std::span<const uint8_t> bytes) {
  static const std::vector<uint8_t> prefix = [] {
    weightcast::UcxVersionBlob blob;
    blob.worker_address = {1};
    auto encoded = weightcast::encode_ucx_version_blob(blob);
    if (!encoded.ok() || encoded->size() < 8) std::abort();
    return std::vector<uint8_t>(encoded->begin(), encoded->begin() + 8);
  }();
  return bytes.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), bytes.begin());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::span<const uint8_t> input(data, size);
  auto blob = decode_ucx_version_blob(input);
  if (!blob.ok()) {
    if (blob.status().message().empty()) std::abort();
    fuzzing::fuzz_reached(has_blob_prefix(input) ? fuzzing::kRefused : fuzzing::kBadMagic);
    return 0;
  }
  if (blob->parts.size() > kUcxBlobMaxParts || blob->worker_address.size() > kUcxBlobMaxKeyBytes ||
      blob->segment.host.size() > kSharedSegmentMaxHostBytes) {
    std::abort();
  }
  for (const auto& p : blob->parts) {
    if (p.name.size() > kUcxBlobMaxNameBytes || p.rkey.size() > kUcxBlobMaxKeyBytes) std::abort();
    // A part of an accepted blob lies inside its segment.
    if (blob->has_segment && p.bytes > 0 &&
        (p.segment_offset > blob->segment.bytes ||
         p.bytes > blob->segment.bytes - p.segment_offset)) {
      std::abort();
    }
  }
  auto again = encode_ucx_version_blob(*blob);
  if (!again.ok()) std::abort();
  auto back = decode_ucx_version_blob(*again);
  if (!back.ok() || back->version != blob->version || back->parts.size() != blob->parts.size() ||
      back->worker_address != blob->worker_address || back->has_segment != blob->has_segment ||
      back->segment != blob->segment) {
    std::abort();
  }
  for (size_t i = 0; i < blob->parts.size(); ++i) {
    const auto& a = blob->parts[i];
    const auto& b = back->parts[i];
    if (a.name != b.name || a.bytes != b.bytes || a.xxh3 != b.xxh3 ||
        a.remote_address != b.remote_address || a.rkey != b.rkey ||
        a.segment_offset != b.segment_offset) {
      std::abort();
    }
  }
  fuzzing::fuzz_reached(fuzzing::kAccepted);
  return 0;
}
