// Validation of an anchor manifest before any of its files is opened: validate_anchor_manifest
// (transport/fs/anchor_reader.h) and index_manifest (anchor_manifest_check.h), which also maps
// every extent to its tensor for the readers.
#include "transport/fs/anchor_manifest_check.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "codec/tensor_bytes.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace anchor_internal {

Status bad_manifest(const std::string& message) {
  return data_loss("anchor manifest: " + message);
}

std::string tensor_where(const proto::StepManifest& m, size_t i) {
  const auto& t = m.tensors(static_cast<int>(i));
  return "tensor '" + t.name() + "' (shard '" + m.parts(static_cast<int>(t.part())).file() +
         "' offset " + std::to_string(t.offset()) + ")";
}

namespace {

// The journal's rule for file names in a manifest (no '/', not "." or "..", printable ASCII).
Status check_file_name(const std::string& what, const std::string& name) {
  if (!is_safe_part_file_name(name)) {
    return bad_manifest(what + " '" + name + "' is not a plain file name");
  }
  return ok_status();
}

Status check_parts_and_extents(const proto::StepManifest& m, AnchorLayout* layout) {
  std::unordered_set<std::string_view> names;
  for (const auto& part : m.parts()) {
    RETURN_IF_ERROR(check_file_name("part file", part.file()));
    if (!names.insert(part.file()).second)
      return bad_manifest("part '" + part.file() + "' is listed twice");
    if (part.compression() != proto::COMPRESSION_NONE || part.raw_bytes() != part.bytes()) {
      return bad_manifest("anchor shard '" + part.file() + "' is compressed or has raw_bytes " +
                          std::to_string(part.raw_bytes()) + " != bytes " +
                          std::to_string(part.bytes()));
    }
  }
  // Extents run shard by shard, each shard from offset 0 to its size without a gap.
  int64_t shard = -1;
  uint64_t cursor = 0;
  for (int e = 0; e <= m.extents_size(); ++e) {
    const bool at_end = e == m.extents_size();
    if (at_end || static_cast<int64_t>(m.extents(e).shard()) != shard) {
      if (shard >= 0 && cursor != m.parts(static_cast<int>(shard)).bytes()) {
        return bad_manifest("extents of shard '" + m.parts(static_cast<int>(shard)).file() +
                            "' end at offset " + std::to_string(cursor) + ", the file has " +
                            std::to_string(m.parts(static_cast<int>(shard)).bytes()) + " bytes");
      }
      if (at_end) break;
      if (m.extents(e).shard() != static_cast<uint64_t>(shard + 1)) {
        return bad_manifest("extent " + std::to_string(e) + " names shard " +
                            std::to_string(m.extents(e).shard()) + " after shard " +
                            std::to_string(shard) + "; shards must follow in order");
      }
      if (m.extents(e).shard() >= static_cast<uint32_t>(m.parts_size())) {
        return bad_manifest("extent " + std::to_string(e) + " names shard " +
                            std::to_string(m.extents(e).shard()) + " of " +
                            std::to_string(m.parts_size()));
      }
      shard = m.extents(e).shard();
      cursor = 0;
      layout->shard_extents.push_back(static_cast<size_t>(e));
    }
    const auto& x = m.extents(e);
    const uint64_t size = m.parts(static_cast<int>(shard)).bytes();
    if (x.offset() != cursor || x.bytes() == 0 || x.bytes() > size - cursor) {
      return bad_manifest("extent " + std::to_string(e) + " [" + std::to_string(x.offset()) +
                          ", +" + std::to_string(x.bytes()) + ") of shard '" +
                          m.parts(static_cast<int>(shard)).file() + "' does not continue at " +
                          std::to_string(cursor) + " inside the file's " + std::to_string(size) +
                          " bytes");
    }
    cursor += x.bytes();
  }
  if (layout->shard_extents.size() != static_cast<size_t>(m.parts_size())) {
    return bad_manifest("extents cover " + std::to_string(layout->shard_extents.size()) + " of " +
                        std::to_string(m.parts_size()) + " shards");
  }
  layout->shard_extents.push_back(static_cast<size_t>(m.extents_size()));
  return ok_status();
}

Status check_tensor(const proto::StepManifest& m, size_t i, const AnchorManifestLimits& limits,
                    DType* dtype) {
  const auto& t = m.tensors(static_cast<int>(i));
  const std::string what = "tensor " + std::to_string(i) + " '" + t.name() + "'";
  if (t.name().empty() || t.name().size() > limits.max_name_bytes) {
    return bad_manifest(what + ": name is empty or longer than the limit");
  }
  const int code = static_cast<int>(t.dtype());
  auto parsed = code > 0 && code < 256 ? dtype_from_code(static_cast<uint8_t>(code))
                                       : Result<DType>(data_loss("dtype out of range"));
  if (!parsed.ok()) return bad_manifest(what + ": unknown dtype " + std::to_string(code));
  *dtype = *parsed;
  if (static_cast<size_t>(t.shape_size()) > limits.max_rank) {
    return bad_manifest(what + ": rank " + std::to_string(t.shape_size()) + " exceeds the limit");
  }
  auto numel = shape_numel({t.shape().begin(), t.shape().end()}, "anchor manifest: " + what);
  if (!numel.ok()) return numel.status();
  if (*numel > UINT64_MAX / dtype_size(*dtype) || *numel * dtype_size(*dtype) != t.bytes()) {
    return bad_manifest(what + ": " + std::to_string(t.bytes()) + " bytes disagree with " +
                        std::to_string(*numel) + " elements of " + std::string(dtype_name(*dtype)));
  }
  if (t.part() >= static_cast<uint32_t>(m.parts_size())) {
    return bad_manifest(what + ": part " + std::to_string(t.part()) + " does not exist");
  }
  const uint64_t size = m.parts(static_cast<int>(t.part())).bytes();
  if (t.offset() > size || t.bytes() > size - t.offset()) {
    return bad_manifest(tensor_where(m, i) + ": " + std::to_string(t.bytes()) +
                        " bytes run past the file's " + std::to_string(size));
  }
  return ok_status();
}

// Walks each shard's extents after the header against its tensors in offset order: every
// tensor starts and ends on an extent boundary and every such extent belongs to a tensor.
Status assign_extents(const proto::StepManifest& m, AnchorLayout* layout) {
  std::vector<std::vector<size_t>> by_shard(m.parts_size());
  for (int i = 0; i < m.tensors_size(); ++i) by_shard[m.tensors(i).part()].push_back(i);
  layout->extent_tensor.assign(m.extents_size(), -1);
  layout->tensor_extent_begin.assign(m.tensors_size(), 0);
  layout->tensor_extent_end.assign(m.tensors_size(), 0);
  for (size_t s = 0; s < by_shard.size(); ++s) {
    auto& tensors = by_shard[s];
    std::sort(tensors.begin(), tensors.end(),
              [&](size_t a, size_t b) { return m.tensors(a).offset() < m.tensors(b).offset(); });
    const auto& header = m.extents(static_cast<int>(layout->shard_extents[s]));
    size_t e = layout->shard_extents[s] + 1;
    const size_t end = layout->shard_extents[s + 1];
    for (const size_t i : tensors) {
      const auto& t = m.tensors(static_cast<int>(i));
      if (t.offset() < header.bytes()) {
        return bad_manifest(tensor_where(m, i) + " lies inside the header");
      }
      if (t.bytes() == 0) continue;
      if (e >= end || m.extents(e).offset() != t.offset()) {
        return bad_manifest(tensor_where(m, i) +
                            " does not start on the next extent (overlap or gap)");
      }
      layout->tensor_extent_begin[i] = e;
      const size_t elem = dtype_size(layout->dtypes[i]);
      for (; e < end && m.extents(e).offset() < t.offset() + t.bytes(); ++e) {
        const auto& x = m.extents(e);
        if (x.offset() + x.bytes() > t.offset() + t.bytes() || (x.offset() - t.offset()) % elem) {
          return bad_manifest("extent at offset " + std::to_string(x.offset()) + " of shard '" +
                              m.parts(s).file() + "' crosses the end or an element of " +
                              tensor_where(m, i));
        }
        layout->extent_tensor[e] = static_cast<int64_t>(i);
      }
      layout->tensor_extent_end[i] = e;
    }
    if (e != end) {
      return bad_manifest("extent at offset " + std::to_string(m.extents(e).offset()) +
                          " of shard '" + m.parts(s).file() + "' belongs to no tensor");
    }
  }
  return ok_status();
}

}  // namespace

Result<AnchorLayout> index_manifest(const proto::StepManifest& m,
                                    const AnchorManifestLimits& limits) {
  if (m.kind() != proto::STEP_ANCHOR) return bad_manifest("kind is not STEP_ANCHOR");
  if (static_cast<size_t>(m.tensors_size()) > limits.max_tensors ||
      static_cast<size_t>(m.parts_size()) > limits.max_parts ||
      static_cast<size_t>(m.extents_size()) > limits.max_extents) {
    return bad_manifest(std::to_string(m.tensors_size()) + " tensors, " +
                        std::to_string(m.parts_size()) + " parts or " +
                        std::to_string(m.extents_size()) + " extents exceed the limits");
  }
  if (m.parts_size() == 0) return bad_manifest("no parts");
  if (!m.index_file().empty()) RETURN_IF_ERROR(check_file_name("index file", m.index_file()));
  AnchorLayout layout;
  RETURN_IF_ERROR(check_parts_and_extents(m, &layout));
  std::unordered_set<std::string_view> names;
  layout.dtypes.resize(m.tensors_size());
  for (int i = 0; i < m.tensors_size(); ++i) {
    RETURN_IF_ERROR(check_tensor(m, i, limits, &layout.dtypes[i]));
    if (!names.insert(m.tensors(i).name()).second) {
      return bad_manifest("tensor '" + m.tensors(i).name() + "' appears twice");
    }
  }
  RETURN_IF_ERROR(assign_extents(m, &layout));
  return layout;
}

}  // namespace anchor_internal

Status validate_anchor_manifest(const proto::StepManifest& manifest,
                                const AnchorManifestLimits& limits) {
  return anchor_internal::index_manifest(manifest, limits).status();
}

}  // namespace weightcast
