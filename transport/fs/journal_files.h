// The small files of a journal root: HEAD, each step's MANIFEST and the lease files. Each is a
// protobuf message (proto/weightcast/journal.proto) in a frame that tells a valid file from a
// torn or corrupted one:
//
//   magic   4 bytes   "WCHD" (HEAD), "WCMF" (MANIFEST), "WCLS" (lease)
//   length  u32 LE    bytes of the message, at most the kind's limit below
//   message length bytes of the serialized protobuf
//   xxh3    u64 LE    XXH3-64 of everything before it
//
// Files are written atomically (temp file, fsync, rename, directory fsync). Readers treat
// them as hostile: every error is kDataLoss naming the file and what was wrong with it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "transport/fs/range_records.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// The StepManifest format_version this build writes and reads.
inline constexpr uint32_t kJournalFormatVersion = 1;

// kFragment: one publisher rank's share of a delta step, a StepManifest of its own ranges
// (rank_fragments.h).
enum class JournalFileKind { kHead, kManifest, kLease, kFragment };

// What a reader accepts. A manifest lists every tensor of a model (a million tensors fit).
struct JournalFileLimits {
  uint32_t max_head_bytes = 4096;
  uint32_t max_manifest_bytes = 512u << 20;
  uint32_t max_lease_bytes = 4096;
  size_t max_tensors = 4'000'000;
  size_t max_parts = 1'000'000;
  size_t max_name_bytes = 4096;
  size_t max_rank = 64;
  size_t max_slice_checksums = 16'000'000;  // StepManifest.slice_checksums entries
};

// A rank fragment's live descriptors (journal.proto StepManifest.live_descriptors).
inline constexpr size_t kMaxRankLiveDescriptors = 16;
inline constexpr size_t kMaxRankLivePathNameBytes = 64;
inline constexpr size_t kMaxRankLiveDescriptorBytes = size_t{1} << 20;

// The 4-byte magic of a kind ("WCHD", "WCMF", "WCLS", "WCRF").
const char* journal_file_magic(JournalFileKind kind);

// The frame around a serialized message; `what` names the file in errors.
std::vector<uint8_t> frame_journal_message(JournalFileKind kind,
                                           const google::protobuf::MessageLite& message);
Result<std::span<const uint8_t>> unframe_journal_message(JournalFileKind kind,
                                                         std::span<const uint8_t> bytes,
                                                         const std::string& what,
                                                         const JournalFileLimits& limits = {});

// Parse and check one file's bytes. The manifest check covers what every step kind needs
// (format version, known kind, versions, unique non-empty tensor names, dtypes, shapes, byte
// sizes, safe part file names, part indices and record ranges inside their part); anchors get
// the extent checks of validate_anchor_manifest on top (transport/fs/anchor_reader.h).
Result<proto::JournalHead> parse_head(std::span<const uint8_t> bytes, const std::string& what,
                                      const JournalFileLimits& limits = {});
Result<proto::StepManifest> parse_manifest(std::span<const uint8_t> bytes, const std::string& what,
                                           const JournalFileLimits& limits = {});
Result<proto::Lease> parse_lease(std::span<const uint8_t> bytes, const std::string& what,
                                 const JournalFileLimits& limits = {});
Status check_manifest(const proto::StepManifest& manifest, const std::string& what,
                      const JournalFileLimits& limits = {});
// check_manifest with the coverage of range records a file's kind needs.
Status check_manifest_covering(const proto::StepManifest& manifest, const std::string& what,
                               const JournalFileLimits& limits, RangeCoverage coverage);
// A rank fragment (kFragment) is checked as a manifest whose range records need not tile
// their tensors (range_records.h RangeCoverage::kPartial).
Result<proto::StepManifest> parse_rank_fragment(std::span<const uint8_t> bytes,
                                                const std::string& what,
                                                const JournalFileLimits& limits = {});

// Whole-file reads (kNotFound for a missing file) and atomic writes.
Result<proto::JournalHead> read_head_file(const std::string& path);
Result<proto::StepManifest> read_manifest_file(const std::string& path);
Result<proto::Lease> read_lease_file(const std::string& path);
Result<proto::StepManifest> read_rank_fragment_file(const std::string& path);
Status write_journal_file(const std::string& path, JournalFileKind kind,
                          const google::protobuf::MessageLite& message);

// A journal identity as HEAD and manifests carry it: at most 64 lowercase hex digits (empty
// in journals from before identities).
bool is_journal_id(const std::string& id);

// A part or shard file name as a manifest may carry it: non-empty, no '/', not "." or "..",
// printable ASCII, at most 255 bytes.
bool is_safe_part_file_name(const std::string& name);

}  // namespace weightcast
