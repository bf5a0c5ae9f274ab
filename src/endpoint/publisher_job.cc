// One publication's run on the publisher's worker (publisher.h): the snapshot allocated, the
// hooked step's records and guard, the tensors read (in place, staged or on their GPU), the
// journal write, then the offer to the subscribers (publisher_offer.cc).
#include <algorithm>
#include <chrono>
#include <future>
#include <span>
#include <system_error>
#include <utility>

#include "codec/base/allocation.h"
#include "src/endpoint/publisher.h"
#include "transport/tensor_staging.h"

namespace weightcast {
namespace {

uint64_t unix_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

Status Publisher::allocate_snapshot(uint64_t version) {
  if (!previous_.empty()) return ok_status();
  // One copy of the snapshot tensors, the snapshot (previous_), brought to each version as it
  // is encoded (contiguous host tensors, read where they live) or as it is read (the others,
  // through bounded staging: publisher_staged.cc). Hooked tensors have none. A host that
  // cannot hold it fails the version with a Status naming the tensor; the next one retries.
  const bool on_device = config_.publisher().snapshot() == "device";
  device_snapshots_.clear();
  device_snapshots_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    const bool hooked = updates_[i] == TensorUpdates::kHooked;
    if (!hooked && on_device && t.memory == MemoryKind::kCuda && t.is_contiguous() &&
        t.element_size() != 8) {
      auto device = DeviceSnapshot::allocate(t);
      if (!device.ok()) {
        previous_.clear();
        return device.status().with_context("version " + std::to_string(version));
      }
      device_snapshots_[i] = std::move(*device);
      previous_.emplace_back();
      continue;
    }
    auto prev = allocate_bytes(hooked ? 0 : t.numel() * t.element_size(),
                               "the publisher's copy of tensor '" + t.name + "'");
    if (!prev.ok()) {
      previous_.clear();
      return prev.status().with_context("version " + std::to_string(version));
    }
    previous_.push_back(std::move(*prev));
  }
  return ok_status();
}

Status Publisher::run_job(PublishJob& job) {
  RETURN_IF_ERROR(wait_for_credit(job.version));
  const auto started = std::chrono::steady_clock::now();
  const uint64_t started_unix = unix_us();
  // Hooked tensors first: their records, and the guard (publisher_step.cc). The guard of host
  // tensors reads them beside the journal write below and must pass before the version
  // commits (SnapshotAdvance::before_commit); the live tensors count as read once it returned.
  std::vector<std::optional<EncodedDelta>> records(tensors_.size());
  bool from_head = true;
  if (job.step) {
    RETURN_IF_ERROR(finish_step(job, &records, &from_head));
    RETURN_IF_ERROR(guard_live(job, records, /*cuda=*/true));
  }
  std::future<Status> host_guard;  // joined before `records` and `job` go
  Status guard_status = ok_status();
  if (job.step) {
    try {
      host_guard = std::async(std::launch::async,
                              [this, &job, &records] { return guard_live(job, records, false); });
    } catch (const std::system_error&) {  // no thread to be had: the guard runs here, first
      guard_status = guard_live(job, records, false);
    }
  }
  const auto join_guard = [&]() -> Status {
    if (host_guard.valid()) guard_status = host_guard.get();
    return guard_status;
  };
  const auto reads_done = [&job, &join_guard] {
    (void)join_guard();
    std::lock_guard<std::mutex> lock(job.mu);
    job.reads_done = true;
    job.cv.notify_all();
  };
  RETURN_IF_ERROR(allocate_snapshot(job.version));
  if (first_job_) {
    first_job_ = false;
    RETURN_IF_ERROR(rebuild_previous());
  }
  // From here the snapshot may be part way between versions. After a failure the journal's
  // head is the version before this one, so the next version (this one cannot be published
  // again) is not consecutive and goes out as an anchor, which overwrites the whole snapshot.
  const bool had_previous = have_previous_;
  have_previous_ = false;
  std::vector<PublishTensor> specs;
  for (const auto& t : tensors_) specs.push_back({t.name, t.dtype, t.shape, {}});
  const bool snapshot_tensors = !std::all_of(updates_.begin(), updates_.end(), [](TensorUpdates u) {
    return u == TensorUpdates::kHooked;
  });
  const bool anchor = !from_head || (snapshot_tensors && !had_previous) ||
                      !writer_->anchor_reason(job.version, specs, job.force_anchor).empty();
  // Snapshot tensors not readable in place go through staging into the snapshot; an anchor
  // reads hooked tensors not readable in place from a copy made now.
  std::vector<std::vector<uint8_t>> hooked_copies(tensors_.size());
  bool wide_changed = false;
  {
    std::vector<TensorRef> gathered;
    std::vector<std::span<uint8_t>> outs;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      if (read_in_place(i)) continue;
      const bool device = device_snapshots_[i] != nullptr;
      if (updates_[i] == TensorUpdates::kSnapshot) {
        Status read = device
                          ? read_device(i, job.version, had_previous, &records[i])
                          : read_staged(i, job.version, had_previous, &records[i], &wide_changed);
        if (!read.ok()) return read.with_context("version " + std::to_string(job.version));
        if (!device) continue;
      }
      // An anchor reads a device snapshot, and a hooked tensor not in the streamed anchor,
      // from a host copy made now.
      if (!anchor || (!device && job.step && job.step->anchor_)) continue;
      auto copy = allocate_bytes(t.numel() * t.element_size(),
                                 "the anchor's host copy of tensor '" + t.name + "'");
      if (!copy.ok()) return copy.status().with_context("version " + std::to_string(job.version));
      hooked_copies[i] = std::move(*copy);
      if (i < fp8_of_.size() && fp8_of_[i] >= 0) {
        // Hooked FP8 values: the live source quantised (the published scales are already
        // the step's; these go to a grid of their own).
        std::vector<float> grid(
            tensors_[fp8_sources_[static_cast<size_t>(fp8_of_[i])].scale].numel());
        Status q = quantize_rows(i, 0, t.shape[0], hooked_copies[i], grid.data());
        if (!q.ok()) return q.with_context("version " + std::to_string(job.version));
        continue;
      }
      gathered.push_back(device ? device_snapshots_[i]->view() : t);
      outs.emplace_back(hooked_copies[i]);
    }
    Status read = gather_tensors(gathered, outs, pool_.get());
    if (!read.ok()) {
      return read.with_context("version " + std::to_string(job.version) + ": reading tensors");
    }
  }
  std::vector<PublishTensor> current, previous;
  std::vector<std::span<uint8_t>> snapshot;
  std::vector<EncodedDelta*> encoded(tensors_.size(), nullptr);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    const bool in_place = read_in_place(i);
    if (records[i]) encoded[i] = &*records[i];
    std::span<const uint8_t> now;
    if (!hooked_copies[i].empty()) {
      now = hooked_copies[i];
    } else if (in_place) {
      now = {t.first_byte(), t.numel() * t.element_size()};
    } else if (updates_[i] == TensorUpdates::kSnapshot) {
      now = previous_[i];  // staged: the snapshot holds this version now
    }
    current.push_back({t.name, t.dtype, t.shape, now});
    if (had_previous || !snapshot_tensors) {
      previous.push_back(
          {t.name, t.dtype, t.shape, updates_[i] == TensorUpdates::kHooked ? now : previous_[i]});
    }
    // A device snapshot's anchor bytes are its host copy.
    snapshot.emplace_back(device_snapshots_[i] ? std::span<uint8_t>(hooked_copies[i])
                                               : std::span<uint8_t>(previous_[i]));
  }
  // A changed 8-byte staged tensor has no record and its snapshot already holds it: the
  // version is an anchor without a delta.
  SnapshotAdvance advance{snapshot, reads_done, encoded, !from_head || wide_changed,
                          {},       join_guard};
  if (job.step && job.step->anchor_) {
    Status streamed = stream_snapshot_tensors(*job.step, current, &advance);
    if (!streamed.ok()) return streamed.with_context("version " + std::to_string(job.version));
  }
  auto published = writer_->publish(job.version, current, previous, job.force_anchor, &advance);
  reads_done();  // also when the publish failed before it read everything
  if (!published.ok()) return published.status();
  PublishReport report = std::move(published).value();
  have_previous_ = true;

  return offer_version(job, std::move(report), started, started_unix);
}

}  // namespace weightcast
