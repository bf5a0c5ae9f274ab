// Rewriting one tensor's record in a committed delta step of a test journal so that only
// applying it can find the fault: the edited header and chunks are reassembled (with a fresh
// XXH3 trailer), the part's XXH3 and the manifest's target checksum follow, so every check
// before the first write passes.
#pragma once

#include <xxhash.h>

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/file_io.h"
#include "codec/base/status.h"
#include "codec/delta_format.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast::testing {

using RecordEdit =
    std::function<void(DeltaRecordHeader* header, std::vector<std::vector<uint8_t>>* chunks)>;

// Forges the record of tensor `index` of delta step `version`; the edit must keep the
// record's size. Errors name what could not be done.
inline Status forge_record(const JournalLayout& layout, uint64_t version, int index,
                           const RecordEdit& edit) {
  const std::string manifest_path = layout.manifest(version);
  ASSIGN_OR_RETURN(proto::StepManifest m, read_manifest_file(manifest_path));
  if (index >= m.tensors_size() || !m.tensors(index).changed()) {
    return invalid_argument("tensor " + std::to_string(index) + " has no record in step " +
                            std::to_string(version));
  }
  proto::TensorState* t = m.mutable_tensors(index);
  const std::string part = layout.step(version) + "/" + m.parts(static_cast<int>(t->part())).file();
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_whole_file(part));
  if (t->offset() + t->bytes() > bytes.size())
    return data_loss(part + " is shorter than its record");
  std::span<uint8_t> slot(bytes.data() + t->offset(), t->bytes());
  ASSIGN_OR_RETURN(DeltaRecordView view, parse_delta_record(slot));
  DeltaRecordHeader header = view.header;
  std::vector<std::vector<uint8_t>> chunks;
  for (const auto& c : view.chunks) chunks.emplace_back(c.begin(), c.end());
  edit(&header, &chunks);
  const std::vector<uint8_t> record = assemble_delta_record(header, chunks);
  if (record.size() != slot.size()) return invalid_argument("the edit changed the record's size");
  std::copy(record.begin(), record.end(), slot.begin());
  RETURN_IF_ERROR(parse_delta_record(slot).status());
  RETURN_IF_ERROR(remove_tree(part));
  RETURN_IF_ERROR(write_and_sync_file(part, bytes, {}));
  t->set_checksum(header.target_checksum);
  m.mutable_parts(static_cast<int>(t->part()))->set_xxh3(XXH3_64bits(bytes.data(), bytes.size()));
  return write_journal_file(manifest_path, JournalFileKind::kManifest, m);
}

}  // namespace weightcast::testing
