#include "transport/fs/rank_publisher.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <unordered_map>

#include "codec/checksum.h"
#include "codec/delta_encoder.h"
#include "codec/slice_checksum.h"
#include "codec/tensor_bytes.h"
#include "transport/fs/range_records.h"
#include "transport/fs/rank_anchor.h"
#include "transport/fs/rank_fragments.h"
#include "transport/fs/rank_plan.h"
#include "transport/fs/slice_checksums.h"

namespace weightcast {
namespace {

// A range, or a box, that holds its elements as one run of global indices is a flat range.
OwnedRange flattened(const std::vector<int64_t>& shape, OwnedRange r) {
  if (!r.box) return r;
  const SliceLocator at(shape, *r.box);
  if (at.end() - at.first() != r.count) return r;
  r.first = at.first();
  r.box.reset();
  return r;
}

// Range `r` of tensor `t`, checked, as pieces of at most `piece` elements (0: whole), each
// its own range record: an engine rank reads only the records its slice meets, so a long range
// costs it no more than the pieces it needs. A box is cut along its first dimension longer
// than 1 (whose rows are then consecutive in its memory); a piece is at least one such row.
Result<std::vector<OwnedRange>> owned_pieces(const SafetensorsTensorSpec& t, OwnedRange r,
                                             uint64_t piece, const std::string& who) {
  const std::string tensor = who + ": tensor '" + r.name + "'";
  ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(t.shape, "tensor '" + r.name + "'"));
  const size_t es = dtype_size(t.dtype);
  std::vector<OwnedRange> out;
  if (r.box) {
    if (Status valid = check_slice(r.name, t.shape, *r.box); !valid.ok()) {
      return invalid_argument(who + ": " + valid.message());
    }
    const uint64_t volume = slice_elements(t.shape, *r.box);
    if (r.box->kind != TensorSlice::Kind::kBox || volume == 0 || r.data == nullptr ||
        (r.count != 0 && r.count != volume)) {
      return invalid_argument(tensor + " box " + describe_slice(*r.box) +
                              " is not a box, is empty, has no memory, or holds " +
                              std::to_string(volume) + " elements, not " + std::to_string(r.count));
    }
    r.count = volume;
    const TensorSlice& box = *r.box;
    size_t d = 0;
    while (d + 1 < box.sizes.size() && box.sizes[d] == 1) ++d;
    uint64_t inner = 1;
    for (size_t e = d + 1; e < box.sizes.size(); ++e) inner *= static_cast<uint64_t>(box.sizes[e]);
    const auto rows = static_cast<uint64_t>(box.sizes.empty() ? 1 : box.sizes[d]);
    const uint64_t step = piece == 0 ? rows : std::max<uint64_t>(1, piece / inner);
    for (uint64_t j = 0; j < rows; j += step) {
      OwnedRange cut = r;
      if (!box.sizes.empty()) {
        cut.box->offsets[d] += static_cast<int64_t>(j);
        cut.box->sizes[d] = static_cast<int64_t>(std::min(step, rows - j));
      }
      cut.count = slice_elements(t.shape, *cut.box);
      cut.data = r.data + j * inner * es;
      out.push_back(flattened(t.shape, std::move(cut)));
    }
    return out;
  }
  if (r.count == 0 || r.first > numel || r.count > numel - r.first || r.data == nullptr) {
    return invalid_argument(tensor + " elements [" + std::to_string(r.first) + ", " +
                            std::to_string(r.first + r.count) +
                            ") are empty, without memory, or not inside its " +
                            std::to_string(numel));
  }
  const uint64_t size = piece ? piece : r.count;
  for (uint64_t done = 0; done < r.count; done += size) {
    out.push_back({r.name, r.first + done, std::min(size, r.count - done), r.data + done * es});
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<RankPublisher>> RankPublisher::open(RankPublisherOptions options,
                                                           std::vector<SafetensorsTensorSpec> model,
                                                           std::vector<OwnedRange> ranges) {
  const std::string who = "publisher rank " + std::to_string(options.rank);
  if (options.ranks == 0 || options.rank >= options.ranks) {
    return invalid_argument(who + " of " + std::to_string(options.ranks) + " ranks");
  }
  std::unique_ptr<RankPublisher> p(new RankPublisher());
  std::vector<OwnedRange> pieces;
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < model.size(); ++i) index.emplace(model[i].name, i);
  for (const OwnedRange& r : ranges) {
    const auto at = index.find(r.name);
    if (at == index.end()) {
      return invalid_argument(who + ": tensor '" + r.name + "' is not in the model");
    }
    ASSIGN_OR_RETURN(std::vector<OwnedRange> cut,
                     owned_pieces(model[at->second], r, options.piece_elements, who));
    for (OwnedRange& piece : cut) {
      pieces.push_back(std::move(piece));
      p->tensor_of_.push_back(at->second);
    }
  }
  ranges = std::move(pieces);
  // The declared slices of each tensor the rank owns part of, once per tensor (not per
  // piece): the cells follow their boundaries, and the cells' shares of them are kept up to date.
  for (const size_t i : p->tensor_of_) {
    if (p->declared_.contains(i)) continue;
    std::vector<TensorSlice>& slices = p->declared_[i];
    if (options.journal.declared_slices) {
      ASSIGN_OR_RETURN(slices, options.journal.declared_slices(model[i].name, model[i].shape));
    }
  }
  // A tensor holds at most kMaxBoxRangesPerTensor boxes among all ranks (range_records.h): a
  // rank whose column cuts would take more than its share of them cuts that tensor by rows only.
  std::vector<std::vector<RankCell>> cells(ranges.size());
  std::map<size_t, size_t> boxes;  // by tensor
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < ranges.size(); ++k) {
      const size_t i = p->tensor_of_[k];
      const bool over = boxes[i] > kMaxBoxRangesPerTensor / options.ranks;
      if (pass == 1 && !over) continue;
      ASSIGN_OR_RETURN(cells[k], rank_cells(model[i].shape, ranges[k].first, ranges[k].count,
                                            ranges[k].box, p->declared_.at(i), pass == 0));
      if (pass == 0) {
        for (const RankCell& c : cells[k]) boxes[i] += c.box ? 1 : 0;
      }
    }
  }
  for (size_t k = 0; k < ranges.size(); ++k) {
    for (RankCell& c : cells[k]) {
      p->cells_.push_back(std::move(c));
      p->cell_range_.push_back(k);
    }
  }
  p->shares_.resize(p->cells_.size());
  // Whether each cell lies inside or outside each declared slice of its tensor, none across.
  for (size_t c = 0; c < p->cells_.size(); ++c) {
    const std::vector<int64_t>& shape = model[p->tensor_of_cell(c)].shape;
    const TensorSlice mine = p->cells_[c].slice();
    std::optional<std::vector<bool>> holds(std::in_place);
    for (const TensorSlice& s : p->slices_of(c)) {
      uint64_t shared = 0;
      for_each_shared_run(shape, s, mine, [&](const SharedRun& r) {
        shared += r.count;
        return true;
      });
      if (shared != 0 && shared != p->cells_[c].count) holds.reset();
      if (holds) holds->push_back(shared != 0);
    }
    p->held_by_.push_back(std::move(holds));
  }
  options.journal.root = options.root;
  if (options.rank == 0) {
    ASSIGN_OR_RETURN(p->writer_, JournalWriter::open(options.journal));
  }
  p->options_ = std::move(options);
  p->model_ = std::move(model);
  p->ranges_ = std::move(ranges);
  return p;
}

std::string RankPublisher::who(uint64_t version) const {
  return "publisher rank " + std::to_string(options_.rank) + ", version " + std::to_string(version);
}

void RankPublisher::refuse(uint64_t version, const Status& why) const {
  // The lead then gives up on the version at once instead of at its deadline; it needs no
  // refusal of its own.
  if (writer_) return;
  (void)put_rank_refusal(JournalLayout(options_.root), version, options_.rank, why.message());
}

Result<RankPublishReport> RankPublisher::publish(uint64_t version, bool force_anchor) {
  if (newest_ && version <= *newest_) {
    return failed_precondition(who(version) + ": not newer than " + std::to_string(*newest_));
  }
  newest_ = version;
  const JournalLayout layout(options_.root);
  const bool follows = last_ && *last_ + 1 == version;
  RankVersionKind kind = RankVersionKind::kAnchor;
  if (writer_) {
    // The lead decides (rank_plan.h): an anchor by rule, when forced, or when its snapshot is
    // not the journal's head (it restarted, or the last version was not committed).
    const bool head_is_last = follows && writer_->head() && writer_->head()->version() == *last_;
    const bool by_rule = force_anchor || version == 0 ||
                         (options_.anchor_every != 0 && version % options_.anchor_every == 0);
    if (!by_rule && head_is_last) {
      kind = RankVersionKind::kDelta;
      RETURN_IF_ERROR(put_rank_delta_plan(layout, version).with_context(who(version)));
    }
  } else {
    ASSIGN_OR_RETURN(kind, wait_for_rank_plan(layout, version, options_.rank, options_.wait));
    if (kind == RankVersionKind::kDelta && !follows) {
      const std::string why =
          "this rank holds no snapshot of version " + std::to_string(version - 1) +
          " (it restarted, skipped versions, or its last part was not committed)";
      last_.reset();
      refuse(version, failed_precondition(why));
      return failed_precondition(who(version) + ": " + why +
                                 "; the lead's next version is an anchor");
    }
  }
  if (kind == RankVersionKind::kDelta) {
    // The delta's encode brings each snapshot to the version as it goes (changed chunks only),
    // so a failure part way leaves the snapshots between versions: an anchor must follow. A
    // version the lead did not commit leaves them ahead of the journal: the lead's rule then
    // makes the next one an anchor.
    auto report = publish_delta(version);
    last_ = report.ok() ? std::optional<uint64_t>(version) : std::nullopt;
    if (!report.ok()) refuse(version, report.status());
    return report;
  }
  last_.reset();
  auto report = publish_anchor(version);
  if (!report.ok()) {
    refuse(version, report.status());
    return report;
  }
  last_ = version;
  return report;
}

template <typename Part>
void RankPublisher::add_shares(Part* part) const {
  // One share per tensor and slice: the sum over the rank's ranges (pieces) of the tensor.
  std::map<size_t, std::vector<uint64_t>> sums;
  for (size_t c = 0; c < cells_.size(); ++c) {
    if (shares_[c].empty()) continue;
    auto& sum = sums[tensor_of_cell(c)];
    sum.resize(shares_[c].size(), 0);
    for (size_t j = 0; j < shares_[c].size(); ++j) sum[j] += shares_[c][j];
  }
  for (const auto& [tensor, sum] : sums) {
    const std::vector<TensorSlice>& slices = declared_.at(tensor);
    for (size_t j = 0; j < sum.size(); ++j) {
      part->add_slice_share(model_[tensor].name, slices[j], sum[j]);
    }
  }
}

std::span<const uint8_t> RankPublisher::cell_now(size_t c, std::vector<uint8_t>* scratch) const {
  const size_t es = dtype_size(model_[tensor_of_cell(c)].dtype);
  return cell_bytes(cells_[c], es, ranges_[cell_range_[c]].data, scratch);
}

Status RankPublisher::take_sums(size_t c, std::span<const uint8_t> bytes) {
  const SafetensorsTensorSpec& t = model_[tensor_of_cell(c)];
  const TensorRef own = TensorRef::contiguous(t.name, t.dtype, const_cast<uint8_t*>(bytes.data()),
                                              static_cast<int64_t>(cells_[c].count));
  const TensorSlice mine = cells_[c].slice();
  ASSIGN_OR_RETURN(const std::vector<uint64_t> sum, partial_checksums(own, t.shape, mine, {mine}));
  checksums_[c] = sum[0];
  shares_[c].clear();
  if (slices_of(c).empty()) return ok_status();
  ASSIGN_OR_RETURN(shares_[c], partial_checksums(own, t.shape, mine, slices_of(c)));
  return ok_status();
}

Result<RankPublishReport> RankPublisher::publish_anchor(uint64_t version) {
  RankPublishReport report;
  report.version = version;
  report.anchor = true;
  if (writer_) {
    RETURN_IF_ERROR(
        writer_->stage_rank_anchor(version, model_).status().with_context(who(version)));
  }
  auto part = RankAnchorWriter::open(options_.root, version, options_.rank, model_,
                                     options_.journal.anchor, options_.wait);
  if (!part.ok()) return part.status().with_context(who(version));
  // The pieces go to the shard files where they lie; the cells take their sums from the same
  // bytes (a delta's base).
  for (size_t k = 0; k < ranges_.size(); ++k) {
    const SafetensorsTensorSpec& t = model_[tensor_of_[k]];
    const uint64_t bytes = ranges_[k].count * dtype_size(t.dtype);
    const std::span<const uint8_t> own(ranges_[k].data, bytes);
    RETURN_IF_ERROR((ranges_[k].box ? (*part)->write_box(t.name, *ranges_[k].box, own)
                                    : (*part)->write(t.name, ranges_[k].first, own))
                        .status());
    report.stored_bytes += bytes;
  }
  checksums_.resize(cells_.size());
  std::vector<uint8_t> scratch;
  // Each cell's bytes as published, gathered once: its sums, and the next delta's base.
  snapshot_.resize(cells_.size());
  for (size_t c = 0; c < cells_.size(); ++c) {
    const auto bytes = cell_now(c, &scratch);
    snapshot_[c].assign(bytes.begin(), bytes.end());
    RETURN_IF_ERROR(take_sums(c, snapshot_[c]).with_context(who(version)));
  }
  add_shares(part->get());
  RETURN_IF_ERROR((*part)->finish().with_context(who(version)));
  if (writer_) {
    ASSIGN_OR_RETURN(report.commit,
                     writer_->publish_rank_anchor(version, options_.ranks, options_.wait));
  }
  return report;
}

DeltaPartOptions RankPublisher::part_options() const {
  DeltaPartOptions parts = options_.journal.delta;
  parts.keep_in_memory = parts.keep_in_memory || static_cast<bool>(options_.serve);
  return parts;
}

Result<RankPublishReport> RankPublisher::publish_delta(uint64_t version) {
  RankPublishReport report;
  report.version = version;
  auto part = RankFragmentWriter::open(options_.root, version, options_.rank, part_options());
  if (!part.ok()) return part.status().with_context(who(version));
  std::vector<uint8_t> scratch;
  for (size_t k = 0; k < cells_.size(); ++k) {
    const SafetensorsTensorSpec& t = model_[tensor_of_cell(k)];
    const size_t es = dtype_size(t.dtype);
    const std::span<const uint8_t> now = cell_now(k, &scratch);
    if (es == 8) {  // the delta codec takes 1-, 2- and 4-byte elements: these may not change
      if (std::memcmp(now.data(), snapshot_[k].data(), now.size()) != 0) {
        return failed_precondition(who(version) + ": 8-byte tensor '" + t.name +
                                   "' changed; publish an anchor (force_anchor on the lead rank)");
      }
      RETURN_IF_ERROR(
          (*part)->add_unchanged_range(t.name, t.dtype, t.shape, cells_[k].slice(), checksums_[k]));
    } else {
      EncodeOptions e;
      e.name = t.name;
      e.dtype = t.dtype;
      e.base_version = version - 1;
      e.target_version = version;
      ASSIGN_OR_RETURN(e.tensor_elements, shape_numel(t.shape, "tensor '" + t.name + "'"));
      // A box's record holds its elements in its local order (EncodeOptions::slice).
      const std::optional<TensorSlice>& box = cells_[k].box;
      const ShapedSlice shaped{t.shape, box.value_or(TensorSlice{})};
      e.range_offset = box ? 0 : cells_[k].first;
      if (box) e.slice = &shaped;
      e.base_checksum = checksums_[k];
      e.pool = options_.journal.pool;
      // A cell inside or outside each declared slice (what the cuts make it) shares its whole
      // C() or nothing. Otherwise the shares follow the changes the encoder reports
      // (O(changed), as the single writer's slice checksums: slice_checksums.h).
      std::optional<SliceChangeSums> tracked;
      if (!slices_of(k).empty() && !held_by_[k]) {
        tracked.emplace(t.shape, slices_of(k), es, shares_[k]);
        e.on_changes = [&tracked](uint64_t first, const uint32_t* positions, uint32_t n,
                                  const uint8_t* old_chunk, const uint8_t* new_chunk) {
          tracked->add(first, positions, n, old_chunk, new_chunk);
        };
      }
      ASSIGN_OR_RETURN(const EncodedDelta d, encode_delta_advancing(snapshot_[k], now, e));
      checksums_[k] = d.header.target_checksum;
      if (tracked) shares_[k] = tracked->sums();
      if (held_by_[k]) {
        for (size_t j = 0; j < shares_[k].size(); ++j) {
          shares_[k][j] = (*held_by_[k])[j] ? checksums_[k] : 0;
        }
      }
      RETURN_IF_ERROR((*part)->add_range(t.name, t.dtype, t.shape, d, box ? &*box : nullptr));
    }
  }
  add_shares(part->get());
  RETURN_IF_ERROR((*part)->finish(options_.serve).with_context(who(version)));
  report.stored_bytes = (*part)->stored_bytes();
  if (writer_) {
    ASSIGN_OR_RETURN(report.commit,
                     writer_->publish_rank_fragments(version, options_.ranks, options_.wait));
  }
  return report;
}

}  // namespace weightcast
