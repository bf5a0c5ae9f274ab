#include "transport/fs/journal_files.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "codec/base/byte_io.h"
#include "codec/base/file_io.h"
#include "codec/delta_manifest.h"
#include "codec/tensor_bytes.h"
#include "transport/fs/anchor_reader.h"
#include "transport/fs/range_records.h"

namespace weightcast {
namespace {

constexpr size_t kFrameOverhead = 4 + 4 + 8;

}  // namespace

const char* journal_file_magic(JournalFileKind kind) {
  switch (kind) {
    case JournalFileKind::kHead:
      return "WCHD";
    case JournalFileKind::kManifest:
      return "WCMF";
    case JournalFileKind::kLease:
      return "WCLS";
    case JournalFileKind::kFragment:
      return "WCRF";
  }
  return "????";
}

namespace {

uint32_t limit_of(JournalFileKind kind, const JournalFileLimits& limits) {
  switch (kind) {
    case JournalFileKind::kHead:
      return limits.max_head_bytes;
    case JournalFileKind::kManifest:
    case JournalFileKind::kFragment:
      return limits.max_manifest_bytes;
    case JournalFileKind::kLease:
      return limits.max_lease_bytes;
  }
  return 0;
}

template <typename Message>
Result<Message> parse_framed(JournalFileKind kind, std::span<const uint8_t> bytes,
                             const std::string& what, const JournalFileLimits& limits) {
  ASSIGN_OR_RETURN(auto payload, unframe_journal_message(kind, bytes, what, limits));
  Message message;
  if (!message.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return data_loss(what + ": the message does not parse as " + message.GetTypeName());
  }
  return message;
}

Status check_tensor(const proto::TensorState& t, const std::string& what,
                    const JournalFileLimits& limits, uint64_t* bytes) {
  const std::string where = what + ": tensor '" + t.name() + "'";
  if (t.name().empty()) return data_loss(what + ": a tensor has an empty name");
  if (t.name().size() > limits.max_name_bytes) {
    return data_loss(what + ": a tensor name is longer than " +
                     std::to_string(limits.max_name_bytes) + " bytes");
  }
  auto dtype = dtype_from_proto(t.dtype());
  if (!dtype.ok()) return data_loss(where + ": " + dtype.status().message());
  if (static_cast<size_t>(t.shape_size()) > limits.max_rank) {
    return data_loss(where + ": rank " + std::to_string(t.shape_size()) + " over the limit");
  }
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  auto numel = shape_numel(shape, where);
  if (!numel.ok()) return data_loss(numel.status().message());
  const uint64_t elem = dtype_size(*dtype);
  if (*numel > UINT64_MAX / elem) return data_loss(where + ": byte size overflows");
  *bytes = *numel * elem;
  return ok_status();
}

// The slice checksums (journal.proto SliceChecksum): each of a listed tensor, a slice inside
// it, listed once.
Status check_slice_checksums(const proto::StepManifest& m, const std::string& what,
                             const JournalFileLimits& limits) {
  if (m.slice_checksums().empty()) return ok_status();
  if (static_cast<size_t>(m.slice_checksums_size()) > limits.max_slice_checksums) {
    return data_loss(what + ": " + std::to_string(m.slice_checksums_size()) +
                     " slice checksums exceed the limit " +
                     std::to_string(limits.max_slice_checksums));
  }
  std::map<std::string, std::vector<int64_t>, std::less<>> shapes;
  for (const auto& t : m.tensors()) shapes[t.name()].assign(t.shape().begin(), t.shape().end());
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& e : m.slice_checksums()) {
    const auto it = shapes.find(e.tensor());
    if (it == shapes.end()) {
      return data_loss(what + ": a slice checksum names tensor '" +
                       e.tensor().substr(0, limits.max_name_bytes) + "', which it does not list");
    }
    if (static_cast<size_t>(e.slice().offsets_size()) > limits.max_rank ||
        static_cast<size_t>(e.slice().sizes_size()) > limits.max_rank) {
      return data_loss(what + ": a slice of tensor '" + e.tensor() + "' has too many dimensions");
    }
    Status inside = check_slice(e.tensor(), it->second, slice_from_proto(e.slice()));
    if (!inside.ok()) return data_loss(what + ": " + inside.message());
    if (!seen.insert({e.tensor(), e.slice().SerializeAsString()}).second) {
      return data_loss(what + ": slice " + describe_slice(slice_from_proto(e.slice())) +
                       " of tensor '" + e.tensor() + "' has two checksums");
    }
  }
  return ok_status();
}

}  // namespace

bool is_safe_part_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (const char c : name) {
    if (c == '/' || c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

std::vector<uint8_t> frame_journal_message(JournalFileKind kind,
                                           const google::protobuf::MessageLite& message) {
  const std::string payload = message.SerializeAsString();
  std::vector<uint8_t> out;
  out.reserve(payload.size() + kFrameOverhead);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(journal_file_magic(kind)[i]));
  append_le<uint32_t>(&out, static_cast<uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  append_le<uint64_t>(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<std::span<const uint8_t>> unframe_journal_message(JournalFileKind kind,
                                                         std::span<const uint8_t> bytes,
                                                         const std::string& what,
                                                         const JournalFileLimits& limits) {
  if (bytes.size() < kFrameOverhead) {
    return data_loss(what + ": " + std::to_string(bytes.size()) +
                     " bytes is too short for a journal file (torn write?)");
  }
  if (std::memcmp(bytes.data(), journal_file_magic(kind), 4) != 0) {
    return data_loss(what + ": wrong magic (expected '" + journal_file_magic(kind) + "')");
  }
  const uint32_t length = load_le<uint32_t>(bytes.data() + 4);
  if (length > limit_of(kind, limits)) {
    return data_loss(what + ": message of " + std::to_string(length) + " bytes exceeds the limit " +
                     std::to_string(limit_of(kind, limits)));
  }
  if (bytes.size() != kFrameOverhead + length) {
    return data_loss(what + ": file is " + std::to_string(bytes.size()) +
                     " bytes, the frame says " + std::to_string(kFrameOverhead + length) +
                     " (truncated or trailing bytes)");
  }
  const uint64_t stored = load_le<uint64_t>(bytes.data() + 8 + length);
  const uint64_t actual = XXH3_64bits(bytes.data(), 8 + length);
  if (stored != actual) return data_loss(what + ": XXH3 mismatch (file corrupted)");
  return bytes.subspan(8, length);
}

bool is_journal_id(const std::string& id) {
  return id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status check_manifest(const proto::StepManifest& m, const std::string& what,
                      const JournalFileLimits& limits) {
  return check_manifest_covering(m, what, limits, RangeCoverage::kWhole);
}

namespace {

// Live descriptors belong to a rank's fragment only: a committed step never keeps them (they
// name memory of processes that come and go).
Status check_live_descriptors(const proto::StepManifest& m, const std::string& what,
                              RangeCoverage coverage) {
  if (m.live_descriptors().empty()) return ok_status();
  if (coverage != RangeCoverage::kPartial) {
    return data_loss(what + ": a committed step carries live descriptors");
  }
  if (m.live_descriptors_size() > static_cast<int>(kMaxRankLiveDescriptors)) {
    return data_loss(what + ": " + std::to_string(m.live_descriptors_size()) +
                     " live descriptors, more than " + std::to_string(kMaxRankLiveDescriptors));
  }
  for (const auto& [path, descriptor] : m.live_descriptors()) {
    if (path.empty() || path.size() > kMaxRankLivePathNameBytes ||
        descriptor.size() > kMaxRankLiveDescriptorBytes) {
      return data_loss(what + ": live descriptor '" + path.substr(0, kMaxRankLivePathNameBytes) +
                       "' (" + std::to_string(descriptor.size()) +
                       " bytes) has an empty or long name or is over " +
                       std::to_string(kMaxRankLiveDescriptorBytes) + " bytes");
    }
  }
  return ok_status();
}

}  // namespace

Status check_manifest_covering(const proto::StepManifest& m, const std::string& what,
                               const JournalFileLimits& limits, RangeCoverage coverage) {
  if (m.format_version() != kJournalFormatVersion) {
    return data_loss(what + ": format version " + std::to_string(m.format_version()) +
                     " (this build reads " + std::to_string(kJournalFormatVersion) + ")");
  }
  if (!is_journal_id(m.journal_id())) {
    return data_loss(what + ": journal_id is not up to 64 lowercase hex digits");
  }
  if (m.kind() == proto::STEP_ANCHOR) {
    if (m.anchor_version() != m.version()) {
      return data_loss(what + ": anchor names anchor_version " +
                       std::to_string(m.anchor_version()) + " instead of its own version " +
                       std::to_string(m.version()));
    }
  } else if (m.kind() == proto::STEP_DELTA) {
    if (m.version() == 0 || m.base_version() != m.version() - 1 ||
        m.anchor_version() > m.base_version()) {
      return data_loss(what + ": delta versions are inconsistent (version " +
                       std::to_string(m.version()) + ", base " + std::to_string(m.base_version()) +
                       ", anchor " + std::to_string(m.anchor_version()) + ")");
    }
  } else if (m.kind() == proto::STEP_PARTS) {
    if (m.tensors_size() != 0) return data_loss(what + ": a parts step lists tensors");
  } else {
    return data_loss(what + ": unknown step kind " + std::to_string(m.kind()));
  }
  if (static_cast<size_t>(m.tensors_size()) > limits.max_tensors ||
      static_cast<size_t>(m.parts_size()) > limits.max_parts) {
    return data_loss(what + ": more tensors or parts than the limits allow");
  }
  RETURN_IF_ERROR(check_live_descriptors(m, what, coverage));
  std::set<std::string, std::less<>> part_names;
  for (const auto& p : m.parts()) {
    if (!is_safe_part_file_name(p.file())) {
      return data_loss(what + ": unsafe part file name '" + p.file() + "'");
    }
    if (!part_names.insert(p.file()).second) {
      return data_loss(what + ": part file '" + p.file() + "' listed twice");
    }
    if (p.compression() == proto::COMPRESSION_NONE && p.raw_bytes() != p.bytes()) {
      return data_loss(what + ": uncompressed part '" + p.file() + "' has raw_bytes " +
                       std::to_string(p.raw_bytes()) + " != bytes " + std::to_string(p.bytes()));
    }
    if (p.compression() != proto::COMPRESSION_NONE &&
        p.compression() != proto::COMPRESSION_ZSTD_BYTE_PLANES) {
      return data_loss(what + ": part '" + p.file() + "' has unknown compression " +
                       std::to_string(p.compression()));
    }
  }
  std::set<std::string, std::less<>> names;
  for (const auto& t : m.tensors()) {
    uint64_t bytes = 0;
    RETURN_IF_ERROR(check_tensor(t, what, limits, &bytes));
    if (!names.insert(t.name()).second) {
      return data_loss(what + ": tensor '" + t.name() + "' listed twice");
    }
    if (!t.ranges().empty()) {
      RETURN_IF_ERROR(check_range_records(m, t, bytes / dtype_size(*dtype_from_proto(t.dtype())),
                                          what, coverage));
      continue;
    }
    const bool located = m.kind() == proto::STEP_ANCHOR || t.changed();
    if (!located) continue;
    if (m.kind() == proto::STEP_ANCHOR && t.bytes() != bytes) {
      return data_loss(what + ": tensor '" + t.name() + "' is " + std::to_string(t.bytes()) +
                       " bytes, its dtype and shape say " + std::to_string(bytes));
    }
    if (t.part() >= static_cast<uint32_t>(m.parts_size())) {
      return data_loss(what + ": tensor '" + t.name() + "' names part " + std::to_string(t.part()) +
                       " of " + std::to_string(m.parts_size()));
    }
    const uint64_t size = m.parts(static_cast<int>(t.part())).raw_bytes();
    if (t.offset() > size || t.bytes() > size - t.offset()) {
      return data_loss(what + ": tensor '" + t.name() + "' lies at [" + std::to_string(t.offset()) +
                       ", +" + std::to_string(t.bytes()) + ") outside its part of " +
                       std::to_string(size) + " bytes");
    }
  }
  RETURN_IF_ERROR(check_slice_checksums(m, what, limits));
  if (m.kind() == proto::STEP_ANCHOR && coverage == RangeCoverage::kWhole) {
    Status s = validate_anchor_manifest(m);
    if (!s.ok()) return data_loss(what + ": " + s.message());
  }
  return ok_status();
}

Result<proto::JournalHead> parse_head(std::span<const uint8_t> bytes, const std::string& what,
                                      const JournalFileLimits& limits) {
  ASSIGN_OR_RETURN(auto head,
                   parse_framed<proto::JournalHead>(JournalFileKind::kHead, bytes, what, limits));
  if (!is_journal_id(head.journal_id())) {
    return data_loss(what + ": journal_id is not up to 64 lowercase hex digits");
  }
  if (head.empty() && (head.version() != 0 || head.anchor_version() != 0)) {
    return data_loss(what + ": an empty HEAD names version " + std::to_string(head.version()));
  }
  if (head.anchor_version() > head.version()) {
    return data_loss(what + ": anchor " + std::to_string(head.anchor_version()) +
                     " is newer than the head version " + std::to_string(head.version()));
  }
  return head;
}

Result<proto::StepManifest> parse_manifest(std::span<const uint8_t> bytes, const std::string& what,
                                           const JournalFileLimits& limits) {
  ASSIGN_OR_RETURN(
      auto m, parse_framed<proto::StepManifest>(JournalFileKind::kManifest, bytes, what, limits));
  RETURN_IF_ERROR(check_manifest(m, what, limits));
  return m;
}

Result<proto::StepManifest> parse_rank_fragment(std::span<const uint8_t> bytes,
                                                const std::string& what,
                                                const JournalFileLimits& limits) {
  ASSIGN_OR_RETURN(
      auto m, parse_framed<proto::StepManifest>(JournalFileKind::kFragment, bytes, what, limits));
  RETURN_IF_ERROR(check_manifest_covering(m, what, limits, RangeCoverage::kPartial));
  return m;
}

Result<proto::Lease> parse_lease(std::span<const uint8_t> bytes, const std::string& what,
                                 const JournalFileLimits& limits) {
  ASSIGN_OR_RETURN(auto lease,
                   parse_framed<proto::Lease>(JournalFileKind::kLease, bytes, what, limits));
  if (lease.holder().empty() || !is_safe_part_file_name(lease.holder())) {
    return data_loss(what + ": lease holder '" + lease.holder() + "' is not a safe name");
  }
  return lease;
}

namespace {

Result<std::vector<uint8_t>> read_small(const std::string& path, uint64_t limit) {
  return read_whole_file(path, limit + kFrameOverhead);
}

}  // namespace

Result<proto::JournalHead> read_head_file(const std::string& path) {
  ASSIGN_OR_RETURN(auto bytes, read_small(path, JournalFileLimits{}.max_head_bytes));
  return parse_head(bytes, path);
}

Result<proto::StepManifest> read_manifest_file(const std::string& path) {
  ASSIGN_OR_RETURN(auto bytes, read_small(path, JournalFileLimits{}.max_manifest_bytes));
  return parse_manifest(bytes, path);
}

Result<proto::StepManifest> read_rank_fragment_file(const std::string& path) {
  ASSIGN_OR_RETURN(auto bytes, read_small(path, JournalFileLimits{}.max_manifest_bytes));
  return parse_rank_fragment(bytes, path);
}

Result<proto::Lease> read_lease_file(const std::string& path) {
  ASSIGN_OR_RETURN(auto bytes, read_small(path, JournalFileLimits{}.max_lease_bytes));
  return parse_lease(bytes, path);
}

Status write_journal_file(const std::string& path, JournalFileKind kind,
                          const google::protobuf::MessageLite& message) {
  const std::vector<uint8_t> bytes = frame_journal_message(kind, message);
  return write_file_atomically(path, bytes);
}

}  // namespace weightcast
