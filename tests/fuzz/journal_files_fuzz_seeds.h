// Seed inputs for the journal files fuzz target (transport/fs/journal_files.h). An input is
// one selector byte and the rest: the selector picks the kind (HEAD, MANIFEST, lease) and
// whether the rest is a whole framed file or only the message, which the target frames with
// a correct length and XXH3 so that mutations reach the protobuf parser and the content checks
// instead of stopping at the checksum.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "transport/fs/journal_files.h"

namespace weightcast::fuzzing {

// Input layout: selector % 3 is the kind (0 HEAD, 1 MANIFEST, 2 lease); (selector / 3) % 2 is
// 1 when the rest is a bare message to frame, 0 when it is a framed file.
inline constexpr JournalFileKind kJournalFuzzKinds[4] = {
    JournalFileKind::kHead, JournalFileKind::kManifest, JournalFileKind::kLease,
    JournalFileKind::kFragment};

// `payload` in the frame of `kind` (magic, u32 length, payload, XXH3-64), whatever it holds.
std::vector<uint8_t> frame_raw_journal_payload(JournalFileKind kind,
                                               std::span<const uint8_t> payload);

// Valid files of each kind, each in both input forms: HEAD, leases, an anchor manifest written
// by write_anchor (several shards and slices), a hand-built anchor with an empty tensor, a
// delta manifest with an uncompressed and a compressed part, and a parts manifest.
std::vector<std::vector<uint8_t>> make_journal_files_seeds();

}  // namespace weightcast::fuzzing
