// The UCX backend's description of one published version: what a subscriber needs to read
// its parts with one-sided gets (the publisher's worker address, and per part its size,
// XXH3-64, remote address and packed rkey), and where the publisher serves copies, the shared
// segment that holds them (shared_segment.h) and each part's offset in it. It travels through a
// RendezvousStore today and in the rank group's Offers later, so it is an opaque, versioned byte
// blob owned by this backend.
//
// Contract: decode accepts any bytes (it is fuzzed) and either returns a blob whose counts,
// sizes and string lengths are within the limits below or kDataLoss naming the bad field.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "transport/ucx/shared_segment.h"

namespace weightcast {

inline constexpr uint32_t kUcxBlobMaxParts = 1u << 20;
inline constexpr uint32_t kUcxBlobMaxNameBytes = 4096;
inline constexpr uint32_t kUcxBlobMaxKeyBytes = 64u << 10;  // worker address, packed rkey

struct UcxPartBlob {
  std::string name;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
  uint64_t remote_address = 0;  // in the publisher's address space
  std::vector<uint8_t> rkey;    // ucp_rkey_pack output; empty for an empty part
  uint64_t segment_offset = 0;  // where the part starts in the segment's data, if there is one
};

struct UcxVersionBlob {
  uint64_t version = 0;
  std::vector<uint8_t> worker_address;  // ucp_worker_get_address output
  std::vector<UcxPartBlob> parts;
  // Copies served from a shared segment: every non-empty part lies inside segment.bytes.
  bool has_segment = false;
  SharedSegmentLocator segment;
};

// Fails (kInvalidArgument) only when the blob exceeds the limits decode enforces.
[[nodiscard]] Result<std::vector<uint8_t>> encode_ucx_version_blob(const UcxVersionBlob& blob);
[[nodiscard]] Result<UcxVersionBlob> decode_ucx_version_blob(std::span<const uint8_t> bytes);

}  // namespace weightcast
