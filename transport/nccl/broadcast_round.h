// One version's delivery over a broadcast group: the framing the rank group's live
// NCCL path and the broadcast Transport (broadcast_transport.h) share. A round is three
// collective calls on the group, the root owning every part:
//   1. the header, kRoundHeaderBytes little-endian bytes:
//        "WCNR" | format version u32 | version u64 | descriptor bytes u64 | descriptor XXH3 u64
//   2. the descriptor (its bytes and XXH3 are the header's):
//        part count u32, then per part: name length u32 | name | size u64 | XXH3-64 u64
//   3. every part, in descriptor order, in one broadcast() (one SchedulePart each); left out
//      when the round has no parts (the rank group's "this version is not carried here, read
//      the journal").
// Receivers learn sizes only from the descriptor, which they verify against the header's XXH3
// and parse within RoundLimits before allocating; each part is verified against its XXH3.
//
// Failure: a framing error (a bad header or descriptor, a limit exceeded, a root refusing its
// input) leaves the members out of step, so the member that finds it aborts the group with
// the error and every member's round fails. A part whose bytes do not match their XXH3 fails
// only that member's round (kDataLoss naming the part and version); the group stays usable.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "transport/nccl/broadcast_group.h"
#include "transport/transport.h"  // Deadline, PartDescriptor

namespace weightcast::nccl {

inline constexpr uint32_t kRoundFormatVersion = 1;
inline constexpr size_t kRoundHeaderBytes = 32;

struct RoundPart {
  std::string name;
  std::span<const uint8_t> bytes;
};

struct ReceivedPart {
  std::string name;
  std::vector<uint8_t> bytes;
  uint64_t xxh3 = 0;  // verified against `bytes`
};

struct ReceivedRound {
  uint64_t version = 0;
  std::vector<ReceivedPart> parts;
  uint64_t bytes = 0;  // sum of the parts' sizes
};

// What a receiver accepts from a descriptor; the root refuses input beyond them too.
struct RoundLimits {
  uint32_t max_parts = 1 << 20;
  uint32_t max_name_bytes = 4096;
  uint64_t max_descriptor_bytes = 64 << 20;
  uint64_t max_total_bytes = uint64_t{1} << 40;
};

// Runs one round on `g`. Every member calls it for every round, with the same `root`.
//  * The root (`g.rank() == root`) broadcasts `version` and `parts`. With `receive` it also
//    returns the round as a receiver would (copies of its parts: a one-member group is
//    publisher and subscriber at once); without, it returns the version and no parts.
//  * Others pass version 0 and no parts (`receive` is ignored: they always receive) and get
//    the round, each part verified. `on_header`, when set, is called on them with the round's
//    version as soon as the header is in and valid: from then on the round is under way (the
//    broadcast Transport uses it so that a reader waits for a round the root already sent).
// Errors: kInvalidArgument for input that cannot work (root outside the group, a receiver
// passing parts), kOutOfRange for a limit, kDataLoss for bytes that do not verify or parse,
// the group's error for a failed collective; each names the round's version when known, the
// part or field at fault, and this rank.
[[nodiscard]] Result<ReceivedRound> run_round(
    BroadcastGroup& g, int root, uint64_t version, std::span<const RoundPart> parts, bool receive,
    const RoundLimits& limits, Deadline deadline,
    const std::function<void(uint64_t version)>& on_header = {});

// The wire format's pieces, public for the fuzz target and the tests.
struct RoundHeader {
  uint64_t version = 0;
  uint64_t descriptor_bytes = 0;
  uint64_t descriptor_xxh3 = 0;
};

std::array<uint8_t, kRoundHeaderBytes> encode_round_header(const RoundHeader& header);

// Checks magic, format version and the descriptor size against `limits`.
[[nodiscard]] Result<RoundHeader> parse_round_header(std::span<const uint8_t> bytes,
                                                     const RoundLimits& limits);

// kOutOfRange naming the part when `parts` exceed `limits`.
[[nodiscard]] Result<std::vector<uint8_t>> encode_round_descriptor(
    std::span<const PartDescriptor> parts, const RoundLimits& limits);

// The parts of a descriptor: kDataLoss for a truncated, overlong or trailing-garbage
// descriptor, kOutOfRange for one beyond `limits` (count, name, total bytes); names the field
// and the part's index. Allocates only in proportion to `bytes`.
[[nodiscard]] Result<std::vector<PartDescriptor>> parse_round_descriptor(
    std::span<const uint8_t> bytes, const RoundLimits& limits);

}  // namespace weightcast::nccl
