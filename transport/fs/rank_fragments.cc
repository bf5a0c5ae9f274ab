#include "transport/fs/rank_fragments.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "codec/base/file_io.h"
#include "codec/base/hex.h"
#include "codec/delta_manifest.h"
#include "codec/tensor_bytes.h"
#include "transport/fault_point.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/rank_plan.h"

namespace weightcast {
namespace {

constexpr auto kFragmentPoll = std::chrono::milliseconds(5);

Status rename_durably(const std::string& from, const std::string& to, const std::string& dir) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return io_error("cannot rename '" + from + "' to '" + to + "': " + std::strerror(errno));
  }
  return fsync_directory(dir);
}

std::string rank_list(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (const uint32_t r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

std::string rank_fragments_dir(const JournalLayout& layout, uint64_t version) {
  return layout.staging() + "/" + JournalLayout::step_dir_name(version) + ".ranks";
}

Status remove_rank_fragments_up_to(const JournalLayout& layout, uint64_t version) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(layout.staging(), ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kSuffix = ".ranks";
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
    const auto v = JournalLayout::parse_step_dir_name(
        std::string_view(name).substr(0, name.size() - kSuffix.size()));
    if (v && *v <= version) RETURN_IF_ERROR(remove_tree(entry.path().string()));
  }
  if (ec) return io_error("cannot list '" + layout.staging() + "': " + ec.message());
  return ok_status();
}

std::string rank_fragment_dir(const JournalLayout& layout, uint64_t version, uint32_t rank) {
  return rank_fragments_dir(layout, version) + "/rank-" + std::to_string(rank);
}

RankFragmentWriter::RankFragmentWriter(JournalLayout layout, uint64_t version, uint32_t rank,
                                       DeltaPartOptions parts)
    : layout_(std::move(layout)), version_(version), rank_(rank) {
  temp_dir_ = rank_fragment_dir(layout_, version_, rank_) + ".tmp";
  fragment_.set_format_version(kJournalFormatVersion);
  fragment_.set_kind(proto::STEP_DELTA);
  fragment_.set_version(version_);
  fragment_.set_base_version(version_ - 1);
  parts_ = std::make_unique<DeltaPartWriter>(temp_dir_, std::move(parts), &fragment_);
}

RankFragmentWriter::~RankFragmentWriter() {
  parts_.reset();  // closes a part file an error left open
  if (!finished_) (void)remove_tree(temp_dir_);
}

Result<std::unique_ptr<RankFragmentWriter>> RankFragmentWriter::open(const std::string& root,
                                                                     uint64_t version,
                                                                     uint32_t rank,
                                                                     DeltaPartOptions parts) {
  if (version == 0) return invalid_argument("rank fragments are deltas: version 0 is an anchor");
  JournalLayout layout(root);
  std::unique_ptr<RankFragmentWriter> w(
      new RankFragmentWriter(layout, version, rank, std::move(parts)));
  RETURN_IF_ERROR(remove_tree(rank_fragment_dir(layout, version, rank)));
  RETURN_IF_ERROR(remove_tree(w->temp_dir_));
  RETURN_IF_ERROR(make_directories(w->temp_dir_));
  return w;
}

namespace {

// A range record of box `box`: named by its first element and volume (range_records.h).
Status set_box(const std::string& name, const std::vector<int64_t>& shape, const TensorSlice& box,
               proto::RangeRecord* r) {
  RETURN_IF_ERROR(check_slice(name, shape, box));
  if (box.kind != TensorSlice::Kind::kBox || slice_elements(shape, box) == 0) {
    return invalid_argument("tensor '" + name + "': " + describe_slice(box) +
                            " is not a box with elements");
  }
  *r->mutable_box() = slice_to_proto(box);
  r->set_range_offset(SliceLocator(shape, box).first());
  r->set_range_elements(slice_elements(shape, box));
  return ok_status();
}

}  // namespace

Status RankFragmentWriter::add_range(const std::string& name, DType dtype,
                                     const std::vector<int64_t>& shape, const EncodedDelta& delta,
                                     const TensorSlice* box) {
  const DeltaRecordHeader& h = delta.header;
  if (h.name != name || h.dtype != dtype || h.base_version + 1 != version_ ||
      h.target_version != version_) {
    return invalid_argument("rank " + std::to_string(rank_) + ", tensor '" + name +
                            "': the record is of tensor '" + h.name + "', versions " +
                            std::to_string(h.base_version) + " to " +
                            std::to_string(h.target_version) + ", not of this fragment's " +
                            std::to_string(version_ - 1) + " to " + std::to_string(version_));
  }
  proto::RangeRecord r;
  r.set_range_offset(h.range_offset);
  r.set_range_elements(h.range_elements);
  if (box != nullptr) RETURN_IF_ERROR(set_box(name, shape, *box, &r));
  r.set_base_checksum(h.base_checksum);
  r.set_checksum(h.target_checksum);
  r.set_changed_elements(h.changed);
  return add(name, dtype, shape, h.tensor_elements, std::move(r), &delta);
}

Status RankFragmentWriter::add_unchanged_range(const std::string& name, DType dtype,
                                               const std::vector<int64_t>& shape,
                                               const TensorSlice& range, uint64_t checksum) {
  proto::RangeRecord r;
  if (range.kind == TensorSlice::Kind::kBox) {
    RETURN_IF_ERROR(set_box(name, shape, range, &r));
  } else {
    r.set_range_offset(range.begin);
    r.set_range_elements(range.end - range.begin);
  }
  r.set_base_checksum(checksum);
  r.set_checksum(checksum);
  ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(shape, "tensor '" + name + "'"));
  return add(name, dtype, shape, numel, std::move(r), nullptr);
}

Status RankFragmentWriter::add(const std::string& name, DType dtype,
                               const std::vector<int64_t>& shape, uint64_t tensor_elements,
                               proto::RangeRecord r, const EncodedDelta* delta) {
  const std::string who = "rank " + std::to_string(rank_) + ", tensor '" + name + "'";
  if (finished_) return failed_precondition(who + ": the fragment is finished");
  ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(shape, who));
  if (tensor_elements != numel) {
    return invalid_argument(who + ": the record's tensor has " + std::to_string(tensor_elements) +
                            " elements, the shape " + std::to_string(numel));
  }
  proto::TensorState* t = nullptr;
  if (const auto at = tensor_at_.find(name); at != tensor_at_.end()) {
    t = fragment_.mutable_tensors(at->second);
  }
  if (t == nullptr) {
    tensor_at_.emplace(name, fragment_.tensors_size());
    t = fragment_.add_tensors();
    t->set_name(name);
    t->set_dtype(dtype_to_proto(dtype));
    for (const int64_t d : shape) t->add_shape(d);
  } else if (t->dtype() != dtype_to_proto(dtype) || t->shape_size() != std::ssize(shape) ||
             !std::equal(shape.begin(), shape.end(), t->shape().begin())) {
    return invalid_argument(who + ": another dtype or shape than its earlier range's");
  }
  r.set_rank(rank_);
  if (delta != nullptr && r.changed_elements() != 0) {
    proto::TensorState located;
    RETURN_IF_ERROR(parts_->add_record(&located, delta->record));
    r.set_changed(true);
    r.set_part(located.part());
    r.set_offset(located.offset());
    r.set_bytes(located.bytes());
  }
  // Kept in ascending order, as a manifest lists them (a rank's pieces come in order: sorted
  // only when one does not); overlaps are the fragment check's.
  auto* ranges = t->mutable_ranges();
  const bool in_order = ranges->empty() || (ranges->end() - 1)->range_offset() < r.range_offset();
  ranges->Add(std::move(r));
  if (!in_order) {
    std::sort(ranges->begin(), ranges->end(),
              [](const auto& a, const auto& b) { return a.range_offset() < b.range_offset(); });
  }
  return ok_status();
}

void RankFragmentWriter::add_slice_share(const std::string& tensor, const TensorSlice& slice,
                                         uint64_t share) {
  add_rank_slice_share(&fragment_, tensor, slice, share);
}

uint64_t RankFragmentWriter::stored_bytes() const {
  return parts_->stored_bytes();
}

std::string merged_part_file(uint32_t rank, const std::string& file) {
  return "r" + std::to_string(rank) + "-" + file;
}

Status RankFragmentWriter::finish(const ServeRankParts& serve) {
  if (finished_) return failed_precondition("rank " + std::to_string(rank_) + ": finished twice");
  RETURN_IF_ERROR(parts_->finish());
  for (auto& t : *fragment_.mutable_tensors()) {
    uint64_t sum = 0, changed = 0;
    for (const auto& r : t.ranges()) {
      sum += r.checksum();
      changed += r.changed_elements();
    }
    t.set_checksum(sum);
    t.set_changed(changed != 0);
    t.set_changed_elements(changed);
  }
  if (serve) {
    auto served = std::make_shared<DeltaInMemory>();
    served->manifest = fragment_;
    for (auto& p : *served->manifest.mutable_parts()) p.set_file(merged_part_file(rank_, p.file()));
    served->parts = parts_->take_stored_parts();
    if (served->parts.size() != static_cast<size_t>(fragment_.parts_size())) {
      return failed_precondition("rank " + std::to_string(rank_) +
                                 ": serving parts needs a writer that keeps them in memory");
    }
    for (auto& [path, descriptor] : serve(version_, std::move(served))) {
      (*fragment_.mutable_live_descriptors())[path] = std::move(descriptor);
    }
  }
  RETURN_IF_ERROR(put_rank_fragment(layout_, rank_, temp_dir_, fragment_));
  finished_ = true;
  return ok_status();
}

void add_rank_slice_share(proto::StepManifest* fragment, const std::string& tensor,
                          const TensorSlice& slice, uint64_t share) {
  proto::SliceChecksum* e = fragment->add_slice_checksums();
  e->set_tensor(tensor);
  *e->mutable_slice() = slice_to_proto(slice);
  e->set_checksum(share);
}

Status put_rank_fragment(const JournalLayout& layout, uint32_t rank, const std::string& temp_dir,
                         const proto::StepManifest& fragment) {
  const std::string what = temp_dir + "/FRAGMENT";
  RETURN_IF_ERROR(check_manifest_covering(fragment, what, {}, RangeCoverage::kPartial));
  RETURN_IF_ERROR(
      write_and_sync_file(what, frame_journal_message(JournalFileKind::kFragment, fragment), {}));
  RETURN_IF_ERROR(fsync_directory(temp_dir));
  fault_point("rank_fragment.written", fragment.version());  // durable, not yet in place
  return rename_durably(temp_dir, rank_fragment_dir(layout, fragment.version(), rank),
                        rank_fragments_dir(layout, fragment.version()));
}

Status wait_for_rank_fragments(const JournalLayout& layout, uint64_t version, uint32_t ranks,
                               std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  std::vector<uint32_t> missing;
  for (;;) {
    missing.clear();
    for (uint32_t r = 0; r < ranks; ++r) {
      std::error_code ec;
      const std::string fragment = rank_fragment_dir(layout, version, r) + "/FRAGMENT";
      if (std::filesystem::exists(fragment, ec)) continue;
      if (auto why = rank_refusal(layout, version, r)) {
        return failed_precondition("version " + std::to_string(version) + " of journal '" +
                                   layout.root() + "': publisher rank " + std::to_string(r) +
                                   " refused to write its part: " + *why +
                                   "; the version is not committed");
      }
      missing.push_back(r);
    }
    if (missing.empty()) return ok_status();
    if (std::chrono::steady_clock::now() >= until) {
      return deadline_exceeded("version " + std::to_string(version) + " of journal '" +
                               layout.root() + "': publisher rank" +
                               (missing.size() > 1 ? "s " : " ") + rank_list(missing) + " of " +
                               std::to_string(ranks) + " put no fragment in place within " +
                               std::to_string(wait.count()) + " ms; the version is not committed");
    }
    std::this_thread::sleep_for(kFragmentPoll);
  }
}

}  // namespace weightcast
