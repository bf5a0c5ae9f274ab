#include "transport/fs/rank_anchor.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "codec/base/file_io.h"
#include "codec/checksum.h"
#include "codec/delta_manifest.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {

std::string rank_anchor_ready_path(const JournalLayout& layout, uint64_t version) {
  return rank_fragments_dir(layout, version) + "/READY";
}

Result<std::unique_ptr<RankAnchorWriter>> RankAnchorWriter::open(
    const std::string& root, uint64_t version, uint32_t rank,
    std::vector<SafetensorsTensorSpec> specs, const AnchorWriteOptions& options,
    std::chrono::milliseconds wait) {
  std::unique_ptr<RankAnchorWriter> w(new RankAnchorWriter());
  w->layout_ = JournalLayout(root);
  w->rank_ = rank;
  const std::string staged = w->layout_.staging() + "/" + JournalLayout::step_dir_name(version);
  ASSIGN_OR_RETURN(
      w->plan_, plan_anchor(staged, specs, options, "rank " + std::to_string(rank) + "'s anchor"));
  w->specs_ = std::move(specs);
  for (size_t i = 0; i < w->specs_.size(); ++i) w->spec_at_.emplace(w->specs_[i].name, i);
  w->state_at_.assign(w->specs_.size(), -1);
  w->fds_.assign(w->plan_.shards.size(), -1);
  const std::string ready = rank_anchor_ready_path(w->layout_, version);
  const auto until = std::chrono::steady_clock::now() + wait;
  for (std::error_code ec; !std::filesystem::exists(ready, ec);) {
    if (std::chrono::steady_clock::now() >= until) {
      return deadline_exceeded("rank " + std::to_string(rank) + ": anchor " +
                               std::to_string(version) + " of journal '" + root +
                               "' was not staged within " + std::to_string(wait.count()) +
                               " ms (no '" + ready + "')");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  w->temp_dir_ = rank_fragment_dir(w->layout_, version, rank) + ".tmp";
  RETURN_IF_ERROR(remove_tree(rank_fragment_dir(w->layout_, version, rank)));
  RETURN_IF_ERROR(remove_tree(w->temp_dir_));
  RETURN_IF_ERROR(make_directories(w->temp_dir_));
  w->fragment_.set_format_version(kJournalFormatVersion);
  w->fragment_.set_kind(proto::STEP_ANCHOR);
  w->fragment_.set_version(version);
  w->fragment_.set_anchor_version(version);
  return w;
}

RankAnchorWriter::~RankAnchorWriter() {
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
  if (!finished_ && !temp_dir_.empty()) (void)remove_tree(temp_dir_);
}

Result<uint64_t> RankAnchorWriter::write(const std::string& name, uint64_t first_element,
                                         std::span<const uint8_t> bytes) {
  const std::string who = "rank " + std::to_string(rank_) + ", tensor '" + name + "'";
  ASSIGN_OR_RETURN(const size_t i, tensor_index(name, who));
  const uint64_t es = dtype_size(specs_[i].dtype), numel = plan_.tensors[i].bytes / es;
  const uint64_t count = bytes.size() / es;
  if (bytes.size() % es != 0 || first_element > numel || count > numel - first_element) {
    return invalid_argument(who + ": " + std::to_string(bytes.size()) + " bytes at element " +
                            std::to_string(first_element) + " are not whole elements inside its " +
                            std::to_string(numel));
  }
  if (count == 0) return uint64_t{0};
  RETURN_IF_ERROR(write_run(i, who, first_element, bytes.data(), count));
  const uint64_t c = checksum_range(bytes.data(), es, count, first_element);
  proto::RangeRecord* r = add_range(i, c);
  r->set_range_offset(first_element);
  r->set_range_elements(count);
  return c;
}

Result<uint64_t> RankAnchorWriter::write_box(const std::string& name, const TensorSlice& box,
                                             std::span<const uint8_t> bytes) {
  const std::string who = "rank " + std::to_string(rank_) + ", tensor '" + name + "'";
  ASSIGN_OR_RETURN(const size_t i, tensor_index(name, who));
  const SafetensorsTensorSpec& spec = specs_[i];
  const uint64_t es = dtype_size(spec.dtype);
  RETURN_IF_ERROR(check_slice(name, spec.shape, box));
  const uint64_t count = slice_elements(spec.shape, box);
  if (box.kind != TensorSlice::Kind::kBox || count == 0 || bytes.size() != count * es) {
    return invalid_argument(who + ": " + std::to_string(bytes.size()) + " bytes are not box " +
                            describe_slice(box) + "'s elements");
  }
  // A box's rows are runs of consecutive elements in the file (row-major, as the tensor).
  uint64_t c = 0;
  Status written;
  for_each_slice_run(spec.shape, box, [&](const SliceRun& run) {
    written = write_run(i, who, run.global, bytes.data() + run.local * es, run.count);
    c += checksum_range(bytes.data() + run.local * es, es, run.count, run.global);
    return written.ok();
  });
  RETURN_IF_ERROR(written);
  proto::RangeRecord* r = add_range(i, c);
  *r->mutable_box() = slice_to_proto(box);
  r->set_range_offset(SliceLocator(spec.shape, box).first());
  r->set_range_elements(count);
  return c;
}

Result<size_t> RankAnchorWriter::tensor_index(const std::string& name,
                                              const std::string& who) const {
  if (finished_) return failed_precondition(who + ": the anchor part is finished");
  const auto at = spec_at_.find(name);
  if (at == spec_at_.end()) return invalid_argument(who + ": not a tensor of the anchor");
  return at->second;
}

Status RankAnchorWriter::write_run(size_t i, const std::string& who, uint64_t first_element,
                                   const uint8_t* data, uint64_t count) {
  const AnchorTensorPlan& t = plan_.tensors[i];
  const uint64_t es = dtype_size(specs_[i].dtype);
  const AnchorShardPlan& shard = plan_.shards[t.shard];
  int& fd = fds_[t.shard];
  if (fd < 0) {
    fd = ::open(shard.path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return anchor_errno_error(who + ": cannot open", shard.path, 0);
  }
  return pwrite_all(fd, shard.path, {data, count * es}, t.offset + first_element * es);
}

proto::RangeRecord* RankAnchorWriter::add_range(size_t i, uint64_t checksum) {
  if (state_at_[i] < 0) {
    state_at_[i] = fragment_.tensors_size();
    proto::TensorState* added = fragment_.add_tensors();
    added->set_name(specs_[i].name);
    added->set_dtype(dtype_to_proto(specs_[i].dtype));
    for (const int64_t d : specs_[i].shape) added->add_shape(d);
  }
  proto::RangeRecord* r = fragment_.mutable_tensors(state_at_[i])->add_ranges();
  r->set_rank(rank_);
  r->set_base_checksum(checksum);
  r->set_checksum(checksum);
  return r;
}

void RankAnchorWriter::add_slice_share(const std::string& tensor, const TensorSlice& slice,
                                       uint64_t share) {
  add_rank_slice_share(&fragment_, tensor, slice, share);
}

Status RankAnchorWriter::finish() {
  if (finished_) return failed_precondition("rank " + std::to_string(rank_) + ": finished twice");
  for (size_t k = 0; k < fds_.size(); ++k) {
    if (fds_[k] < 0) continue;
    if (::fsync(fds_[k]) != 0) return anchor_errno_error("cannot fsync", plan_.shards[k].path, 0);
    ::close(fds_[k]);
    fds_[k] = -1;
  }
  for (auto& t : *fragment_.mutable_tensors()) {
    auto* ranges = t.mutable_ranges();
    std::sort(ranges->begin(), ranges->end(),
              [](const auto& a, const auto& b) { return a.range_offset() < b.range_offset(); });
    uint64_t sum = 0;
    for (const auto& r : *ranges) sum += r.checksum();
    t.set_checksum(sum);
  }
  RETURN_IF_ERROR(put_rank_fragment(layout_, rank_, temp_dir_, fragment_));
  finished_ = true;
  return ok_status();
}

}  // namespace weightcast
