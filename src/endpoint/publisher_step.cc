// The publisher's hooked mode (publish_step.h): opening a step on the live tensors' checksums,
// queueing it, and the guard that runs on the worker before anything is published.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "codec/checksum.h"
#include "codec/cuda_codec.h"
#include "src/endpoint/publisher.h"
#include "transport/fs/anchor_plan.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {

bool Publisher::any_hooked() const {
  return std::any_of(updates_.begin(), updates_.end(),
                     [](TensorUpdates u) { return u == TensorUpdates::kHooked; });
}

Result<uint64_t> Publisher::live_checksum(size_t tensor) const {
  const TensorRef& t = tensors_[tensor];
  if (t.memory == MemoryKind::kCuda) return cuda_codec::checksum_view(t, 0);
  return checksum_view(t, 0, pool_.get());
}

Result<std::shared_ptr<PublishStep>> Publisher::begin_step(uint64_t version, bool force_anchor) {
  std::shared_ptr<PublishJob> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return failed_precondition("publisher is stopping");
    if (tensors_.empty()) return failed_precondition("step begun before any tensor was registered");
    if (auto open = open_step_.lock(); open && !open_step_queued_) {
      return failed_precondition("version " + std::to_string(version) + ": the step of version " +
                                 std::to_string(open->version()) + " is still open");
    }
    const std::optional<uint64_t> newest = any_queued_ ? std::optional(last_queued_) : head_;
    if (newest && version <= *newest) {
      return failed_precondition("version " + std::to_string(version) + " is not newer than " +
                                 std::to_string(*newest) + ", the last published or queued");
    }
    if (!open_step_queued_) {
      // The last step was dropped unpublished after writes, perhaps: its tensors' live
      // checksums are unknown.
      std::fill(live_checksums_.begin(), live_checksums_.end(), std::nullopt);
    }
    if (!queue_.empty()) last = queue_.back();
  }
  if (last) {
    // The step's writes change the tensors: the previous publication must have read them.
    std::unique_lock<std::mutex> lock(last->mu);
    const auto deadline = std::chrono::steady_clock::now() + options_.credit_timeout;
    if (!last->cv.wait_until(lock, deadline, [&] { return last->reads_done || last->done; })) {
      return deadline_exceeded("version " + std::to_string(version) +
                               ": the publication of version " + std::to_string(last->version) +
                               " did not read the tensors within " +
                               std::to_string(options_.credit_timeout.count()) + " ms");
    }
  }
  std::vector<PublishStep::Hooked> hooked;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (updates_[i] != TensorUpdates::kHooked) continue;
    if (i < fp8_of_.size() && fp8_of_[i] >= 0) {
      auto h = begin_hooked_fp8(i, version);
      if (!h.ok()) return h.status().with_context("version " + std::to_string(version));
      hooked.push_back(std::move(*h));
      ++i;  // its scales, registered right after it, are recorded with it
      continue;
    }
    std::optional<uint64_t> base;
    {
      std::lock_guard<std::mutex> lock(mu_);
      base = live_checksums_[i];
    }
    if (!base) {
      // After a start or a refused step: the base is what the live tensor holds now (verified
      // against the journal's head by the guard, which publishes an anchor if it differs).
      auto computed = live_checksum(i);
      if (!computed.ok()) {
        return computed.status().with_context("version " + std::to_string(version) +
                                              ": checksum of hooked tensor '" + tensors_[i].name +
                                              "'");
      }
      base = *computed;
    }
    auto recorder = hooked_recorder(i, version, *base);
    if (!recorder.ok()) return recorder.status();
    hooked.push_back({i, tensors_[i], std::move(*recorder), nullptr});
  }
  std::shared_ptr<PublishStep> step(new PublishStep(version, std::move(hooked)));
  step->force_anchor_ = force_anchor;
  RETURN_IF_ERROR(open_streamed_anchor(*step, force_anchor));
  std::lock_guard<std::mutex> lock(mu_);
  open_step_ = step;
  open_step_queued_ = false;
  return step;
}

Result<std::unique_ptr<DeltaRecorder>> Publisher::hooked_recorder(size_t tensor, uint64_t version,
                                                                  uint64_t base_checksum) const {
  EncodeOptions e;
  e.name = tensors_[tensor].name;
  e.dtype = tensors_[tensor].dtype;
  // Version 0 has no delta (it is always an anchor); its recorder still needs a valid pair.
  e.target_version = std::max<uint64_t>(version, 1);
  e.base_version = e.target_version - 1;
  e.base_checksum = base_checksum;
  return DeltaRecorder::create(e, tensors_[tensor].numel());
}

Status Publisher::open_streamed_anchor(PublishStep& step, bool force_anchor) {
  const uint64_t version = step.version();
  const uint64_t every = config_.anchor_every();
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool maybe = force_anchor || (!head_ && queue_.empty()) ||
                       (every > 0 && version - head_anchor_ >= every);
    if (!maybe || !any_hooked()) return ok_status();
    // The journal decides: once the queued publications are done, the writer is idle.
    const auto deadline = std::chrono::steady_clock::now() + options_.credit_timeout;
    if (!cv_.wait_until(lock, deadline, [&] { return queue_.empty() || stopping_; })) {
      return deadline_exceeded("version " + std::to_string(version) +
                               ": the publications before it did not finish within " +
                               std::to_string(options_.credit_timeout.count()) + " ms");
    }
  }
  std::vector<PublishTensor> specs;
  std::vector<SafetensorsTensorSpec> anchor_specs;
  for (const auto& t : tensors_) {
    specs.push_back({t.name, t.dtype, t.shape, {}});
    anchor_specs.push_back({t.name, t.dtype, t.shape});
  }
  const std::string why = writer_->anchor_reason(version, specs, force_anchor);
  if (why.empty()) return ok_status();
  const std::string dir = JournalLayout(config_.journal_root()).staging() + "/stream-" +
                          JournalLayout::step_dir_name(version);
  RETURN_IF_ERROR(remove_tree(dir));
  RETURN_IF_ERROR(make_directories(dir));
  step.anchor_dir_ = dir;
  ASSIGN_OR_RETURN(step.anchor_, StreamingAnchorWriter::open(dir, std::move(anchor_specs),
                                                             writer_->anchor_options()));
  if (options_.log) {
    options_.log("publisher: version " + std::to_string(version) + " is an anchor (" + why +
                 "): its shards are written during the step, in " + dir);
  }
  return ok_status();
}

Status Publisher::stream_snapshot_tensors(PublishStep& step, std::span<const PublishTensor> current,
                                          SnapshotAdvance* advance) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (updates_[i] == TensorUpdates::kSnapshot) {
      RETURN_IF_ERROR(step.anchor_->write_tensor(i, current[i].bytes));
    }
  }
  advance->anchor_files = [this, &step](const std::string& dir, proto::StepManifest* manifest) {
    RETURN_IF_ERROR(step.anchor_->finish(manifest));
    // The shards hold what the step's writes made: the records' target checksums (the guard,
    // which may still be running beside the journal write, proves separately, before the
    // version commits, that the live tensors hold the same).
    for (const auto& h : step.hooked_) {
      std::vector<std::pair<size_t, const DeltaRecorder*>> written{{h.tensor, h.recorder.get()}};
      if (h.fp8) written.emplace_back(h.fp8->scale_tensor, h.fp8->scales.get());
      for (const auto& [t, recorder] : written) {
        const uint64_t in_files = step.anchor_->checksums()[t];
        if (in_files != recorder->target_checksum()) {
          return data_loss("tensor '" + tensors_[t].name + "': the streamed anchor in " +
                           step.anchor_dir_ + " has checksum " + std::to_string(in_files) +
                           ", the step's writes " + std::to_string(recorder->target_checksum()));
        }
      }
    }
    std::vector<std::string> files;
    for (const auto& part : manifest->parts()) files.push_back(part.file());
    files.push_back(manifest->index_file());
    for (const auto& f : files) {
      const std::string from = step.anchor_dir_ + "/" + f, to = dir + "/" + f;
      if (std::rename(from.c_str(), to.c_str()) != 0) {
        return io_error("cannot move streamed anchor file '" + from + "' to '" + to +
                        "': " + std::strerror(errno));
      }
    }
    return write_anchor_config_json(dir, writer_->anchor_options());  // an FP8 group's
  };
  return ok_status();
}

Result<PublishHandle> Publisher::publish_step(std::shared_ptr<PublishStep> step) {
  if (!step) return invalid_argument("publish_step of an empty step");
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return failed_precondition("publisher is stopping");
  if (open_step_.lock() != step || open_step_queued_) {
    return failed_precondition("the step of version " + std::to_string(step->version()) +
                               " is not this publisher's open step");
  }
  {
    std::lock_guard<std::mutex> step_lock(step->mu_);
    step->published_ = true;
  }
  open_step_queued_ = true;
  auto job = std::make_shared<PublishJob>();
  job->version = step->version();
  job->force_anchor = step->force_anchor_;
  job->step = std::move(step);
  RETURN_IF_ERROR(enqueue(job));
  return PublishHandle(job, this);
}

Status Publisher::refuse_step(const PublishJob& job, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(live_checksums_.begin(), live_checksums_.end(), std::nullopt);
  return why.with_context("version " + std::to_string(job.version) + " refused, nothing published");
}

Status Publisher::finish_step(PublishJob& job, std::vector<std::optional<EncodedDelta>>* records,
                              bool* from_head) {
  PublishStep& step = *job.step;
  {
    std::lock_guard<std::mutex> lock(step.mu_);
    if (!step.failed_.ok()) return refuse_step(job, step.failed_);
  }
  if (step.encoder_) step.encoder_->drain();  // the chunks the writes left to encode
  for (auto& h : step.hooked_) {
    auto record = h.recorder->finish();
    if (!record.ok()) return refuse_step(job, record.status());
    (*records)[h.tensor] = std::move(*record);
    if (!h.fp8) continue;
    auto scales = h.fp8->scales->finish();
    if (!scales.ok()) return refuse_step(job, scales.status());
    (*records)[h.fp8->scale_tensor] = std::move(*scales);
  }
  // The records describe the journal's head's successor only if the step began from it.
  const proto::StepManifest* head = writer_->head_manifest();
  *from_head = head != nullptr && head->version() + 1 == job.version &&
               head->tensors_size() == static_cast<int>(tensors_.size());
  for (const auto& h : step.hooked_) {
    for (const size_t t : {h.tensor, h.fp8 ? h.fp8->scale_tensor : h.tensor}) {
      if (!*from_head) break;
      const auto& before = head->tensors(static_cast<int>(t));
      *from_head = before.name() == tensors_[t].name &&
                   before.checksum() == (*records)[t]->header.base_checksum;
    }
  }
  if (!*from_head && options_.log && head != nullptr) {
    options_.log("publisher: the step of version " + std::to_string(job.version) +
                 " did not start from the journal's head (version " +
                 std::to_string(head->version()) + "): publishing an anchor");
  }
  return ok_status();
}

Status Publisher::guard_live(PublishJob& job,
                             const std::vector<std::optional<EncodedDelta>>& records, bool cuda) {
  PublishStep& step = *job.step;
  // The guard: what the live bytes hold is what the step's writes made, nothing else. One
  // pass over every hooked tensor: the small host ones side by side on the pool, each on one
  // thread; the large ones (and CUDA ones) one at a time, each spread over the pool.
  // An FP8 source's guard quantises the live matrix (fp8_live_checksums).
  std::vector<size_t> mine, small, large, fp8;
  for (size_t k = 0; k < step.hooked_.size(); ++k) {
    if ((step.hooked_[k].live.memory == MemoryKind::kCuda) != cuda) continue;
    (step.hooked_[k].fp8 ? fp8 : mine).push_back(k);
  }
  std::vector<Result<uint64_t>> live(step.hooked_.size(), Result<uint64_t>(uint64_t{0}));
  for (const size_t k : fp8) RETURN_IF_ERROR(guard_fp8(job, step.hooked_[k], records));
  for (const size_t k : mine) {
    const TensorRef& t = tensors_[step.hooked_[k].tensor];
    const bool whole = t.memory == MemoryKind::kCuda || t.numel() * t.element_size() >= (16u << 20);
    (whole ? large : small).push_back(k);
  }
  pool_->parallel_for(small.size(), [&](size_t j) {
    live[small[j]] = checksum_view(tensors_[step.hooked_[small[j]].tensor], 0, nullptr);
  });
  for (const size_t k : large) live[k] = live_checksum(step.hooked_[k].tensor);
  for (const size_t k : mine) {
    const auto& h = step.hooked_[k];
    const uint64_t expected = records[h.tensor]->header.target_checksum;
    if (!live[k].ok()) return refuse_step(job, live[k].status());
    if (*live[k] != expected) {
      return refuse_step(
          job, failed_precondition("tensor '" + h.live.name +
                                   "' changed outside the step (live checksum " +
                                   std::to_string(*live[k]) + ", the step's writes make " +
                                   std::to_string(expected) + ")"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const size_t k : mine) {
    const auto& h = step.hooked_[k];
    live_checksums_[h.tensor] = records[h.tensor]->header.target_checksum;
  }
  return ok_status();
}

}  // namespace weightcast
