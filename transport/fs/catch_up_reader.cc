#include "transport/fs/catch_up_reader.h"

#include "codec/base/file_io.h"

#include <algorithm>
#include <map>
#include <thread>

#include "codec/base/file_io.h"
#include "codec/delta_apply.h"
#include "codec/delta_format.h"
#include "codec/delta_manifest.h"
#include "codec/tensor_bytes.h"
#include "codec/tensor_ref.h"
#include "transport/fs/anchor_in_place.h"
#include "transport/fs/anchor_reader.h"
#include "transport/fs/anchor_slices.h"
#include "transport/fs/delta_step.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/retention.h"
#include "transport/fs/step_commit.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string CatchUpPlan::describe() const {
  std::string s = anchor ? "load anchor " + std::to_string(*anchor) : "from the held version";
  if (deltas.empty()) return s;
  return s + ", then apply deltas " + std::to_string(deltas.front()) + ".." +
         std::to_string(deltas.back());
}

CatchUpReader::CatchUpReader(std::string root, std::vector<ReaderDestination> destinations,
                             CatchUpOptions options)
    : layout_(std::move(root)),
      destinations_(std::move(destinations)),
      options_(std::move(options)),
      checksums_(destinations_.size(), 0) {
  for (auto& d : destinations_) {
    // A slice that is the whole tensor is no slice.
    if (d.slice && *d.slice == TensorSlice::whole(d.shape)) d.slice.reset();
    TensorRef ref = d.view;
    if (ref.data != nullptr) {
      d.dtype = ref.dtype;
      if (!d.slice) d.shape = ref.shape;
    } else {
      ref = TensorRef{};
      ref.dtype = d.dtype;
      ref.shape = d.shape;
      if (d.slice) ref.shape = {static_cast<int64_t>(d.bytes.size() / dtype_size(d.dtype))};
      ref.data = d.bytes.data();
    }
    ref.name = d.name;
    refs_.push_back(std::move(ref));
    slices_.push_back(d.slice ? std::optional<SliceDestination>(SliceDestination{d.shape, *d.slice})
                              : std::nullopt);
  }
}

void CatchUpReader::open_write_window(uint64_t version) {
  if (window_open_) return;
  window_open_ = true;
  if (options_.before_write) options_.before_write(version);
}

void CatchUpReader::close_write_window() {
  if (!window_open_ || !held_) return;
  window_open_ = false;
  if (options_.after_write) options_.after_write(*held_);
}

void CatchUpReader::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Result<proto::JournalHead> CatchUpReader::head() const {
  if (options_.assume_head) return *options_.assume_head;
  ASSIGN_OR_RETURN(auto head, read_journal_head(layout_));
  if (!head) return not_found("journal '" + layout_.root() + "' has no HEAD (nothing published)");
  return *head;
}

std::string CatchUpReader::divergence(const proto::JournalHead& head) const {
  if (!held_) return "";
  if (head.journal_id() != held_journal_) {
    return "journal '" + layout_.root() + "' is another journal now (id " +
           (held_journal_.empty() ? std::string("none") : held_journal_) + " -> " +
           (head.journal_id().empty() ? std::string("none") : head.journal_id()) + "): version " +
           std::to_string(*held_) + " held from the old one";
  }
  if (*held_ > head.version()) {
    return "HEAD of journal '" + layout_.root() + "' went back to version " +
           std::to_string(head.version()) + " below the held " + std::to_string(*held_);
  }
  return "";
}

Result<std::vector<uint64_t>> CatchUpReader::anchors_at_or_below(
    uint64_t target, std::vector<std::string>* notes) const {
  ASSIGN_OR_RETURN(auto steps, layout_.list_steps());
  std::vector<uint64_t> anchors;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it > target) continue;
    auto m = read_manifest_file(layout_.manifest(*it));
    if (!m.ok()) {
      if (notes) notes->push_back("step " + std::to_string(*it) + ": " + m.status().message());
      continue;
    }
    if (m->kind() == proto::STEP_ANCHOR) anchors.push_back(*it);
  }
  return anchors;
}

Result<CatchUpPlan> CatchUpReader::plan(std::optional<uint64_t> target) const {
  ASSIGN_OR_RETURN(const proto::JournalHead h, head());
  return plan_at(h, target);
}

Result<CatchUpPlan> CatchUpReader::plan_at(const proto::JournalHead& h,
                                           std::optional<uint64_t> target) const {
  CatchUpPlan plan;
  plan.target = h.version();
  if (target && *target > plan.target) {
    return not_found("version " + std::to_string(*target) + " is not committed in journal '" +
                     layout_.root() + "' (HEAD is " + std::to_string(plan.target) + ")");
  }
  if (target) plan.target = *target;
  if (held_ && *held_ > plan.target) {
    return failed_precondition("the destinations hold version " + std::to_string(*held_) +
                               ", newer than the target " + std::to_string(plan.target));
  }
  uint64_t from = held_.value_or(0);
  // From the held version when there is one (anchors carry their delta); catch_up falls back
  // to an anchor when that chain turns out broken.
  if (!held_) {
    ASSIGN_OR_RETURN(auto anchors, anchors_at_or_below(plan.target, nullptr));
    if (anchors.empty()) {
      return not_found("journal '" + layout_.root() + "' has no readable anchor at or below " +
                       std::to_string(plan.target));
    }
    plan.anchor = anchors.front();
    from = anchors.front();
  }
  for (uint64_t v = from + 1; v <= plan.target && v > from; ++v) plan.deltas.push_back(v);
  return plan;
}

Status CatchUpReader::check_destinations(const proto::StepManifest& m,
                                         const std::string& what) const {
  if (static_cast<size_t>(m.tensors_size()) != destinations_.size()) {
    return failed_precondition(what + " has " + std::to_string(m.tensors_size()) +
                               " tensors, the reader registered " +
                               std::to_string(destinations_.size()));
  }
  for (size_t i = 0; i < destinations_.size(); ++i) {
    const auto& t = m.tensors(static_cast<int>(i));
    const auto& d = destinations_[i];
    if (t.name() != d.name || t.dtype() != dtype_to_proto(d.dtype) ||
        !std::equal(t.shape().begin(), t.shape().end(), d.shape.begin(), d.shape.end())) {
      return failed_precondition(what + ": tensor " + std::to_string(i) + " is '" + t.name() +
                                 "', the reader registered '" + d.name +
                                 "' (destinations must match the manifest's names, dtypes and "
                                 "shapes, in its order)");
    }
    auto numel = shape_numel(d.shape, "tensor '" + d.name + "'");
    if (!numel.ok()) return numel.status();
    if (d.slice) {
      RETURN_IF_ERROR(check_slice(d.name, d.shape, *d.slice));
      numel = slice_elements(d.shape, *d.slice);
      if (refs_[i].numel() != *numel) {
        return invalid_argument("destination of '" + d.name + "' has " +
                                std::to_string(refs_[i].numel()) + " elements, its slice " +
                                describe_slice(*d.slice) + " " + std::to_string(*numel));
      }
    }
    if (d.view.data == nullptr && d.bytes.size() != *numel * dtype_size(d.dtype)) {
      return invalid_argument("destination of '" + d.name + "' has " +
                              std::to_string(d.bytes.size()) + " bytes, the tensor needs " +
                              std::to_string(*numel * dtype_size(d.dtype)));
    }
  }
  return ok_status();
}

Status CatchUpReader::load_anchor(uint64_t version) {
  const std::string what = layout_.step(version);
  ASSIGN_OR_RETURN(auto m, read_manifest_file(layout_.manifest(version)));
  if (m.kind() != proto::STEP_ANCHOR) return data_loss(what + " is not an anchor");
  RETURN_IF_ERROR(check_destinations(m, what));
  RETURN_IF_ERROR(validate_anchor_manifest(m));
  ASSIGN_OR_RETURN(std::vector<uint64_t> expected, expected_checksums(m, what));
  held_.reset();
  open_write_window(version);
  // Whole tensors together; each slice on its own, reading only its bytes.
  std::vector<TensorRef> whole = refs_;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (slices_[i]) whole[i].data = nullptr;
  }
  RETURN_IF_ERROR(read_anchor_in_place(layout_.step(version), m, whole, options_.pool,
                                       kAnchorStagingBytes, &bytes_written_));
  for (size_t i = 0; i < destinations_.size(); ++i) {
    if (!slices_[i]) continue;
    RETURN_IF_ERROR(read_anchor_slice(layout_.step(version), m, i, *slices_[i], refs_[i],
                                      expected[i], &bytes_written_));
  }
  checksums_ = std::move(expected);
  held_ = version;
  held_journal_ = m.journal_id().empty() ? head_journal_ : m.journal_id();
  close_write_window();
  return ok_status();
}

Status CatchUpReader::apply_delta_step_live(uint64_t version, const LiveRecordReader& live) {
  if (!held_ || *held_ + 1 != version) {
    return failed_precondition("delta " + std::to_string(version) + " applies to version " +
                               std::to_string(version - 1));
  }
  return apply_delta_step(version, &live);
}

Status CatchUpReader::apply_delta_step(uint64_t version, const LiveRecordReader* live) {
  // An anchor step carries its delta from the version before in delta/ (journal_writer.h).
  std::string dir = layout_.step(version);
  ASSIGN_OR_RETURN(auto m, read_manifest_file(dir + "/MANIFEST"));
  if (m.kind() == proto::STEP_ANCHOR) {
    dir += "/delta";
    auto delta = read_manifest_file(dir + "/MANIFEST");
    if (!delta.ok()) {
      return Status(delta.status().code(),
                    "anchor " + std::to_string(version) +
                        " carries no delta from the version before: " + delta.status().message());
    }
    m = std::move(*delta);
  }
  if (m.version() != version) {
    return data_loss(dir + " is not a delta on version " + std::to_string(version - 1));
  }
  const auto load_part = [&](size_t index) -> Result<std::vector<uint8_t>> {
    ASSIGN_OR_RETURN(auto bytes, read_delta_part(dir, m, index));
    delta_bytes_read_ += m.parts(static_cast<int>(index)).bytes();
    return bytes;
  };
  const auto load_record = [&](uint32_t part, uint64_t offset,
                               uint64_t bytes) -> Result<std::optional<std::vector<uint8_t>>> {
    const proto::PartInfo& p = m.parts(static_cast<int>(part));  // checked by the manifest
    using Bytes = std::optional<std::vector<uint8_t>>;
    if (p.compression() != proto::COMPRESSION_NONE) return Bytes();
    if (live) {
      ASSIGN_OR_RETURN(Bytes served, (*live)(p.file(), offset, bytes));
      if (served) return served;
    }
    ASSIGN_OR_RETURN(auto record, read_file_range(dir + "/" + p.file(), offset, bytes));
    delta_bytes_read_ += bytes;
    return Bytes(std::move(record));
  };
  return apply_delta_manifest(m, dir, load_part, load_record);
}

Status CatchUpReader::run_deltas(uint64_t from_exclusive, uint64_t target, CatchUpReport* report) {
  for (uint64_t v = from_exclusive + 1; v <= target && v > from_exclusive; ++v) {
    if (lease_steps_) {
      RETURN_IF_ERROR(
          write_lease(layout_, options_.lease_holder, v - 1, unix_now_ms(), options_.lease_ttl_ms));
    }
    RETURN_IF_ERROR(apply_delta_step(v));
    ++report->deltas_applied;
    log("applied delta " + std::to_string(v));
  }
  return ok_status();
}

Result<CatchUpReport> CatchUpReader::catch_up(std::optional<uint64_t> target) {
  const double t0 = now_s();
  const uint64_t written_before = bytes_written_;
  CatchUpReport report;
  ASSIGN_OR_RETURN(const proto::JournalHead h, head());
  head_journal_ = h.journal_id();
  if (const std::string why = divergence(h); !why.empty()) {
    report.fallbacks.push_back(why);
    log("reloading from an anchor: " + why);
    held_.reset();
  }
  ASSIGN_OR_RETURN(auto first, plan_at(h, target));
  const uint64_t goal = first.target;
  // Deltas from a held version at or after HEAD's anchor lie in the chain retention always
  // keeps (retention.h), so a live reader following the head writes no lease (two durable
  // file operations a version). Only a run of retention passes during the read could remove
  // them, and a step that vanishes is a read error the anchor fallback below recovers from.
  lease_steps_ =
      !options_.lease_holder.empty() && (first.anchor || !held_ || *held_ < h.anchor_version());
  // Whatever way this call ends, the lease it wrote must not outlive it: a lease left behind
  // would pin every step from its version until it expires.
  struct LeaseRelease {
    CatchUpReader* reader;
    ~LeaseRelease() {
      if (reader->lease_steps_) (void)release_lease(reader->layout_, reader->options_.lease_holder);
      reader->lease_steps_ = false;
    }
  } lease_release{this};
  Status last = ok_status();
  // A verified version the destinations hold after a chain failed (a failed delta is
  // reverted): an anchor at or below it would replay the same deltas, so only newer ones are
  // tried, and failing those the destinations keep it.
  std::optional<uint64_t> keep;
  if (!first.anchor) {
    last = run_deltas(*held_, goal, &report);
    if (last.ok()) {
      report.version = goal;
      report.bytes_written = bytes_written_ - written_before;
      report.seconds = now_s() - t0;
      return report;
    }
    report.fallbacks.push_back("deltas from held version: " + last.message());
    log("falling back to an anchor: " + last.message());
    keep = held_;
    lease_steps_ = !options_.lease_holder.empty();
  }
  ASSIGN_OR_RETURN(auto anchors, anchors_at_or_below(goal, &report.fallbacks));
  for (const uint64_t a : anchors) {
    if (keep && a <= *keep) break;
    if (lease_steps_) {
      RETURN_IF_ERROR(
          write_lease(layout_, options_.lease_holder, a, unix_now_ms(), options_.lease_ttl_ms));
    }
    last = load_anchor(a);
    if (last.ok()) {
      ++report.anchors_loaded;
      log("loaded anchor " + std::to_string(a));
      last = run_deltas(a, goal, &report);
    }
    if (last.ok()) break;
    report.fallbacks.push_back("anchor " + std::to_string(a) + ": " + last.message());
    log("anchor " + std::to_string(a) + " failed, trying an older one: " + last.message());
    if (held_) keep = held_;
  }
  if (!held_ || *held_ != goal) {
    std::string all;
    for (const auto& f : report.fallbacks) all += "\n  " + f;
    return Status(last.ok() ? StatusCode::kNotFound : last.code(),
                  "cannot reach version " + std::to_string(goal) + " in journal '" +
                      layout_.root() + "':" + (all.empty() ? " no anchor" : all));
  }
  report.version = goal;
  report.bytes_written = bytes_written_ - written_before;
  report.seconds = now_s() - t0;
  return report;
}

Result<CatchUpReport> CatchUpReader::follow(uint64_t until_version,
                                            std::chrono::steady_clock::time_point deadline,
                                            std::chrono::milliseconds poll) {
  CatchUpReport total;
  while (true) {
    auto h = head();
    auto head = h.ok() ? Result<uint64_t>(h->version()) : Result<uint64_t>(h.status());
    if (head.ok() && (!held_ || *head > *held_ || !divergence(*h).empty())) {
      ASSIGN_OR_RETURN(auto step, catch_up(*head));
      total.anchors_loaded += step.anchors_loaded;
      total.deltas_applied += step.deltas_applied;
      total.fallbacks.insert(total.fallbacks.end(), step.fallbacks.begin(), step.fallbacks.end());
      total.seconds += step.seconds;
      total.version = step.version;
    } else if (!head.ok() && head.status().code() != StatusCode::kNotFound) {
      return head.status();
    }
    if (held_ && *held_ >= until_version) return total;
    if (std::chrono::steady_clock::now() + poll > deadline) {
      return deadline_exceeded("journal '" + layout_.root() + "' did not reach version " +
                               std::to_string(until_version) + " before the deadline (holding " +
                               (held_ ? std::to_string(*held_) : std::string("nothing")) + ")");
    }
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace weightcast
