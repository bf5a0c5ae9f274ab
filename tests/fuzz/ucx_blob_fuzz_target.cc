// libFuzzer target: decode a UCX version blob (transport/ucx/ucx_version_blob.h), the bytes a
// subscriber receives from the store or an Offer. Invariants: a refusal carries a message; an
// accepted blob is within the limits and encodes back to bytes that decode to the same blob.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "transport/ucx/ucx_version_blob.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  auto blob = decode_ucx_version_blob(std::span<const uint8_t>(data, size));
  if (!blob.ok()) {
    if (blob.status().message().empty()) std::abort();
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
  return 0;
}
