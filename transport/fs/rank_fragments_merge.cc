// The journal writer's side of rank fragments (rank_fragments.h): merging every rank's fragment
// of a version into the version's manifest.
#include <map>

#include "codec/base/file_io.h"
#include "codec/base/hex.h"
#include "codec/delta_manifest.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/range_records.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {

Result<proto::StepManifest> merge_rank_fragments(
    const JournalLayout& layout, const proto::StepManifest& head, uint64_t version, uint32_t ranks,
    std::chrono::milliseconds wait, const std::string& staged_dir,
    std::vector<std::map<std::string, std::string>>* live) {
  const std::string what =
      "version " + std::to_string(version) + " of journal '" + layout.root() + "'";
  if (ranks == 0) return invalid_argument(what + ": no publisher ranks");
  if (head.version() + 1 != version) {
    return failed_precondition(what + ": rank fragments are a delta on the head version " +
                               std::to_string(head.version()));
  }
  RETURN_IF_ERROR(wait_for_rank_fragments(layout, version, ranks, wait));

  proto::StepManifest out;
  out.set_format_version(kJournalFormatVersion);
  out.set_kind(proto::STEP_DELTA);
  out.set_version(version);
  out.set_base_version(version - 1);
  out.set_anchor_version(head.anchor_version());
  std::map<std::string, int, std::less<>> index;
  for (const auto& h : head.tensors()) {
    proto::TensorState* t = out.add_tensors();
    t->set_name(h.name());
    t->set_dtype(h.dtype());
    *t->mutable_shape() = h.shape();
    index[h.name()] = out.tensors_size() - 1;
  }
  std::vector<std::vector<RankSlice>> owned(head.tensors_size());
  std::map<std::pair<std::string, std::string>, proto::SliceChecksum> shares;
  std::vector<std::pair<std::string, std::string>> moves;  // fragment part file -> step file
  for (uint32_t rank = 0; rank < ranks; ++rank) {
    const std::string dir = rank_fragment_dir(layout, version, rank);
    ASSIGN_OR_RETURN(const proto::StepManifest f, read_rank_fragment_file(dir + "/FRAGMENT"));
    const std::string who = what + ": rank " + std::to_string(rank) + "'s fragment";
    if (f.version() != version || f.base_version() + 1 != version) {
      return data_loss(who + " is of version " + std::to_string(f.version()));
    }
    if (live != nullptr) {
      live->emplace_back(f.live_descriptors().begin(), f.live_descriptors().end());
    }
    const auto first_part = static_cast<uint32_t>(out.parts_size());
    for (const auto& p : f.parts()) {
      proto::PartInfo* moved = out.add_parts();
      *moved = p;
      moved->set_file(merged_part_file(rank, p.file()));
      moves.emplace_back(dir + "/" + p.file(), staged_dir + "/" + moved->file());
    }
    for (const auto& ft : f.tensors()) {
      const auto it = index.find(ft.name());
      if (it == index.end()) {
        return failed_precondition(who + " lists tensor '" + ft.name() + "', which version " +
                                   std::to_string(version - 1) + " does not have");
      }
      proto::TensorState* t = out.mutable_tensors(it->second);
      if (ft.dtype() != t->dtype() || ft.shape().size() != t->shape().size() ||
          !std::equal(ft.shape().begin(), ft.shape().end(), t->shape().begin())) {
        return failed_precondition(who + ": tensor '" + ft.name() +
                                   "' has another dtype or shape than in version " +
                                   std::to_string(version - 1));
      }
      const std::vector<int64_t> shape(t->shape().begin(), t->shape().end());
      for (const auto& r : ft.ranges()) {
        if (r.rank() != rank) return data_loss(who + " lists a range of rank " + describe_range(r));
        proto::RangeRecord* kept = t->add_ranges();
        *kept = r;
        if (r.changed()) kept->set_part(first_part + r.part());
        owned[it->second].push_back({rank, shape, *dtype_from_proto(ft.dtype()), range_slice(r)});
      }
    }
    for (const auto& s : f.slice_checksums()) {
      auto [at, fresh] = shares.try_emplace({s.tensor(), s.slice().SerializeAsString()}, s);
      if (!fresh) at->second.set_checksum(at->second.checksum() + s.checksum());
    }
  }
  for (int i = 0; i < out.tensors_size(); ++i) {
    proto::TensorState* t = out.mutable_tensors(i);
    if (owned[i].empty() && t->shape_size() > 0 &&
        std::find(t->shape().begin(), t->shape().end(), 0) != t->shape().end()) {
      t->set_checksum(0);  // an empty tensor: nothing to own, C() is 0
      continue;
    }
    if (owned[i].empty()) {
      return failed_precondition(what + ": tensor '" + t->name() + "' is in no rank's fragment");
    }
    RETURN_IF_ERROR(check_tiling(t->name(), owned[i]));
    auto* ranges = t->mutable_ranges();
    std::sort(ranges->begin(), ranges->end(),
              [](const auto& a, const auto& b) { return a.range_offset() < b.range_offset(); });
    uint64_t sum = 0, changed = 0;
    for (const auto& r : *ranges) {
      sum += r.checksum();
      changed += r.changed_elements();
    }
    t->set_checksum(sum);
    t->set_changed(changed != 0);
    t->set_changed_elements(changed);
    const uint64_t base = ranges_base_checksum(*t), held = head.tensors(i).checksum();
    if (base != held) {
      return failed_precondition(what + ": the ranks' ranges of tensor '" + t->name() +
                                 "' start from checksum " + hex16(base) + ", version " +
                                 std::to_string(version - 1) + " holds " + hex16(held) +
                                 ": a rank did not start from the head version");
    }
  }
  for (auto& [key, s] : shares) *out.add_slice_checksums() = std::move(s);
  RETURN_IF_ERROR(check_manifest_covering(out, what, {}, RangeCoverage::kWhole));
  for (const auto& [from, to] : moves) {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      return io_error(what + ": cannot move '" + from + "' to '" + to +
                      "': " + std::strerror(errno));
    }
  }
  RETURN_IF_ERROR(fsync_directory(staged_dir));
  return out;
}

}  // namespace weightcast
