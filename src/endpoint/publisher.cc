#include "src/endpoint/publisher.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <span>
#include <utility>

#include "codec/allocation.h"
#include "codec/delta_manifest.h"
#include "src/control/wait_reporter.h"
#include "transport/tensor_staging.h"

namespace weightcast {
namespace {

uint64_t unix_us() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

Status PublishHandle::wait_for_reads(EndpointDeadline deadline) const {
  if (!job_) return failed_precondition("empty publish handle");
  std::unique_lock<std::mutex> lock(job_->mu);
  if (!job_->cv.wait_until(lock, deadline, [&] { return job_->reads_done || job_->done; })) {
    return deadline_exceeded("version " + std::to_string(job_->version) +
                             ": tensors not read before the deadline");
  }
  return job_->reads_done ? ok_status() : job_->status;
}

Result<PublishReport> PublishHandle::wait_published(EndpointDeadline deadline) const {
  if (!job_) return failed_precondition("empty publish handle");
  std::unique_lock<std::mutex> lock(job_->mu);
  if (!job_->cv.wait_until(lock, deadline, [&] { return job_->done; })) {
    return deadline_exceeded("version " + std::to_string(job_->version) +
                             ": not published before the deadline");
  }
  if (!job_->status.ok()) return job_->status;
  return job_->report;
}

Status PublishHandle::wait_committed(EndpointDeadline deadline) const {
  auto published = wait_published(deadline);
  if (!published.ok()) return published.status();
  return owner_->wait_committed(job_->version, deadline);
}

Publisher::Publisher(proto::GroupConfig config, PublisherOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  if (options_.credit_timeout.count() == 0) {
    options_.credit_timeout = std::chrono::milliseconds(2 * config_.timeouts().ack_timeout_ms());
  }
}

Result<std::unique_ptr<Publisher>> Publisher::start(const proto::GroupConfig& config,
                                                    PublisherOptions options) {
  std::unique_ptr<Publisher> p(new Publisher(config, std::move(options)));
  p->pool_ = std::make_unique<ThreadPool>(p->options_.threads);
  JournalOptions journal;
  journal.root = config.journal_root();
  journal.anchor_every = config.anchor_every();
  journal.retention.keep_anchors = std::max<uint32_t>(1, config.retain_anchors());
  journal.pool = p->pool_.get();
  journal.log = p->options_.log;
  Publisher* self = p.get();
  LivePathRank live;
  live.rank = p->options_.rank;
  live.config = config;
  live.send = [self](proto::Envelope e) {
    if (self->link_) self->link_->send(std::move(e));
  };
  live.log = p->options_.log;
  p->live_ = start_live_servers(
      p->options_.live_paths ? *p->options_.live_paths : *default_live_paths(), live);
  // The live paths serve each delta's parts as the journal writer produced them (no copy).
  journal.delta.keep_in_memory = !p->live_.empty();
  journal.delta.before_write = p->options_.before_part_write;
  ASSIGN_OR_RETURN(p->writer_, JournalWriter::open(std::move(journal)));
  if (p->writer_->head()) {
    p->head_ = p->writer_->head()->version();
    p->head_anchor_ = p->writer_->head()->anchor_version();
  }

  RankLinkOptions link;
  link.rank = p->options_.rank;
  link.role = proto::ROLE_PUBLISHER;
  link.heartbeat = std::chrono::milliseconds(config.timeouts().heartbeat_ms());
  link.log = p->options_.log;
  for (const auto& path : p->live_) link.transports.push_back(path->name());
  ASSIGN_OR_RETURN(p->link_,
                   RankLink::start(
                       config, link, [self](const proto::Envelope& m) { self->on_message(m); },
                       [self] { return self->head(); }));
  p->worker_ = std::thread([self] { self->worker(); });
  return p;
}

Publisher::~Publisher() {
  stop();
}

Status Publisher::register_tensor(const TensorRef& ref, TensorUpdates updates) {
  RETURN_IF_ERROR(check_stageable(ref));
  if (updates == TensorUpdates::kHooked && ref.element_size() == 8) {
    return invalid_argument("tensor '" + ref.name +
                            "' has 8-byte elements, which the delta codec does not cover: "
                            "register it for the snapshot path");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (any_queued_) {
    return failed_precondition("tensor '" + ref.name + "' registered after the first publish");
  }
  for (const auto& t : tensors_) {
    if (t.name == ref.name) return invalid_argument("tensor '" + ref.name + "' registered twice");
  }
  tensors_.push_back(ref);
  updates_.push_back(updates);
  live_checksums_.emplace_back();
  return ok_status();
}

Result<PublishHandle> Publisher::publish(uint64_t version, bool force_anchor) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return failed_precondition("publisher is stopping");
  if (tensors_.empty()) return failed_precondition("publish before any tensor was registered");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (updates_[i] == TensorUpdates::kHooked) {
      return failed_precondition("tensor '" + tensors_[i].name +
                                 "' is hooked: publish its versions with begin_step and "
                                 "publish_step");
    }
  }
  const std::optional<uint64_t> newest = any_queued_ ? std::optional(last_queued_) : head_;
  if (newest && version <= *newest) {
    return failed_precondition("version " + std::to_string(version) + " is not newer than " +
                               std::to_string(*newest) + ", the last published or queued");
  }
  auto job = std::make_shared<PublishJob>();
  job->version = version;
  job->force_anchor = force_anchor;
  queue_.push_back(job);
  last_queued_ = version;
  any_queued_ = true;
  cv_.notify_all();
  return PublishHandle(job, this);
}

std::optional<uint64_t> Publisher::head() const {
  std::lock_guard<std::mutex> lock(mu_);
  return head_;
}

std::optional<uint64_t> Publisher::committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

Status Publisher::wait_committed(uint64_t version, EndpointDeadline deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  const bool reached = cv_.wait_until(lock, deadline, [&] {
    return (committed_ && *committed_ >= version) || link_->fatal_error();
  });
  if (auto fatal = link_->fatal_error()) return failed_precondition(*fatal);
  if (!reached) {
    return deadline_exceeded("version " + std::to_string(version) +
                             " not committed before the deadline (committed: " +
                             (committed_ ? std::to_string(*committed_) : "none") + ")");
  }
  return ok_status();
}

void Publisher::on_message(const proto::Envelope& m) {
  for (const auto& path : live_) {
    if (path->on_control_message(m)) return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // A Welcome carries the committed version: a publisher (re)joining after a commit was
  // announced must not wait for it forever.
  uint64_t committed = 0;
  if (m.has_commit()) {
    committed = m.commit().version();
  } else if (m.has_welcome() && m.welcome().has_committed()) {
    committed = m.welcome().committed_version();
  } else {
    return;
  }
  if (!committed_ || committed > *committed_) committed_ = committed;
  uncommitted_.erase(uncommitted_.begin(), uncommitted_.upper_bound(committed));
  cv_.notify_all();
}

Status Publisher::wait_for_credit(uint64_t version) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint32_t limit = std::max<uint32_t>(1, config_.max_in_flight());
  const auto deadline = std::chrono::steady_clock::now() + options_.credit_timeout;
  WaitReporter waiting(options_.log);
  while (uncommitted_.size() >= limit && !stopping_) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded("version " + std::to_string(version) + ": " +
                               std::to_string(uncommitted_.size()) +
                               " published versions still uncommitted after " +
                               std::to_string(options_.credit_timeout.count()) +
                               " ms (max_in_flight " + std::to_string(limit) + ")");
    }
    cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                std::chrono::milliseconds(500)));
    waiting.report("publisher: version " + std::to_string(version) + " waits for " +
                   std::to_string(uncommitted_.size()) +
                   " published versions to be committed (max_in_flight " + std::to_string(limit) +
                   "; is the coordinator at " + config_.coordinator_endpoint() + " reachable?)");
  }
  if (stopping_) {
    return failed_precondition("publisher stopping: version " + std::to_string(version) +
                               " was not published");
  }
  return ok_status();
}

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
  if (job.step) {
    host_guard = std::async(std::launch::async,
                            [this, &job, &records] { return guard_live(job, records, false); });
  }
  Status guard_status = ok_status();
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
      if (t.memory != MemoryKind::kCuda && t.is_contiguous()) continue;  // read in place
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
    const bool in_place = t.memory != MemoryKind::kCuda && t.is_contiguous();
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

void Publisher::worker() {
  while (true) {
    std::shared_ptr<PublishJob> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;
      job = queue_.front();
    }
    Status status = run_job(*job);
    if (!status.ok() && options_.log) {
      options_.log("publisher: version " + std::to_string(job->version) +
                   " failed: " + status.message());
    }
    {
      // A later queued version follows the last good one (as an anchor when not consecutive).
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      cv_.notify_all();  // begin_step of an anchor version waits for an empty queue
    }
    std::lock_guard<std::mutex> lock(job->mu);
    job->status = status;
    job->done = true;
    job->cv.notify_all();
  }
}

void Publisher::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  if (link_) link_->stop(reason);
}

}  // namespace weightcast
