#include "src/endpoint/subscriber.h"

#include <algorithm>
#include <utility>

#include "codec/base/allocation.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/tensor_staging.h"

namespace weightcast {

Subscriber::Subscriber(proto::GroupConfig config, SubscriberOptions options)
    : config_(std::move(config)), options_(std::move(options)) {}

Result<std::unique_ptr<Subscriber>> Subscriber::create(const proto::GroupConfig& config,
                                                       SubscriberOptions options) {
  std::unique_ptr<Subscriber> s(new Subscriber(config, std::move(options)));
  s->pool_ = std::make_unique<ThreadPool>(s->options_.threads);
  s->nack_log_ = std::make_unique<RateLimitedLog>(s->options_.log);
  s->recover_log_ = std::make_unique<RateLimitedLog>(s->options_.log);
  for (const auto& r : s->config_.ranks()) {
    if (r.rank() == s->options_.rank) s->rank_config_ = &r;
  }
  if (s->rank_config_ != nullptr && !s->rank_config_->layout().empty()) {
    ASSIGN_OR_RETURN(LayoutRules rules, LayoutRules::compile(s->config_));
    s->layout_rules_ = std::move(rules);
  }
  return s;
}

Subscriber::~Subscriber() {
  stop();
}

Status Subscriber::add_destination(const TensorRef& destination,
                                   std::optional<SliceDestination> slice) {
  RETURN_IF_ERROR(check_stageable(destination));
  if (link_) {
    return failed_precondition("tensor '" + destination.name + "' registered after connect()");
  }
  for (const auto& t : tensors_) {
    if (t.name == destination.name) {
      return invalid_argument("tensor '" + destination.name + "' registered twice");
    }
  }
  tensors_.push_back(destination);
  slices_.push_back(std::move(slice));
  return ok_status();
}

Status Subscriber::register_tensor(const TensorRef& destination) {
  if (layout_rules_) {
    ASSIGN_OR_RETURN(const TensorSlice slice, slice_of(destination.name, destination.shape));
    if (slice != TensorSlice::whole(destination.shape)) {
      return invalid_argument(
          "tensor '" + destination.name + "': part " + std::to_string(rank_config_->part()) +
          " of layout '" + rank_config_->layout() + "' holds its slice " + describe_slice(slice) +
          "; register it with register_slice and the tensor's global shape");
    }
  }
  return add_destination(destination, std::nullopt);
}

Status Subscriber::connect() {
  if (link_) return failed_precondition("connect() called twice");
  if (tensors_.empty()) return failed_precondition("connect() before any tensor was registered");
  // The reader writes the engine's tensors themselves: no staging copy of the model.
  std::vector<ReaderDestination> dest;
  engine_bytes_ = 0;
  for (const auto& t : tensors_) {
    ReaderDestination d;
    d.name = t.name;
    d.view = t;
    const auto& slice = slices_[dest.size()];
    if (slice) {
      d.shape = slice->shape;
      d.slice = slice->slice;
    }
    dest.push_back(std::move(d));
    engine_bytes_ += t.numel() * t.element_size();
  }
  claim_pending_ = options_.claimed_version.has_value();
  CatchUpOptions reader;
  reader.pool = pool_.get();
  reader.lease_holder = "rank-" + std::to_string(options_.rank);
  reader.lease_ttl_ms = config_.timeouts().lease_ttl_ms();
  reader.log = options_.log;
  reader.before_write = options_.before_apply;
  reader.after_write = options_.after_apply;
  reader_ = std::make_unique<CatchUpReader>(config_.journal_root(), std::move(dest), reader);

  RankLinkOptions link;
  link.rank = options_.rank;
  link.role = proto::ROLE_SUBSCRIBER;
  link.held_journal = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return current_journal_;
  };
  link.heartbeat = std::chrono::milliseconds(config_.timeouts().heartbeat_ms());
  link.log = options_.log;
  start_live_paths(&link);
  auto started = RankLink::start(
      config_, link, [this](const proto::Envelope& m) { on_message(m); },
      [this] { return current_version(); });
  if (!started.ok()) {
    stop("");
    return started.status();
  }
  link_ = std::move(started).value();
  // After link_ is set: the worker sends on it. Messages before this only set the target.
  worker_ = std::thread([this] { worker(); });
  return ok_status();
}

void Subscriber::on_message(const proto::Envelope& m) {
  if (note_live_message(m)) return;
  if (m.has_commit()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!committed_ || m.commit().version() > *committed_) committed_ = m.commit().version();
    cv_.notify_all();
    return;
  }
  std::optional<uint64_t> target;
  std::string journal;  // the journal `target` belongs to (empty: not said)
  bool retry = false;
  bool from_anchor = false;
  if (m.has_welcome() && m.welcome().has_head()) {
    target = m.welcome().head_version();
    journal = m.welcome().journal_id();
  }
  if (m.has_offer()) {
    target = m.offer().version();
    journal = m.offer().journal_id();
  }
  if (m.has_recover()) {
    target = m.recover().target_version();
    journal = m.recover().journal_id();
    retry = true;
    from_anchor = m.recover().from_anchor();
    recover_log_->log("recover",
                      "subscriber: recover to v" + std::to_string(*target) +
                          (from_anchor ? " from an anchor: " : ": ") + m.recover().reason(),
                      "subscriber: {} more recovers", m.recover().reason());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (m.has_recover()) {
    // Recovers in quick succession (an ack the coordinator keeps refusing) back off as nacks
    // do, so that no loop runs faster than the backoff.
    const auto now = std::chrono::steady_clock::now();
    recent_recovers_ = now - last_recover_ < std::chrono::seconds(10) ? recent_recovers_ + 1 : 1;
    last_recover_ = now;
    if (recent_recovers_ >= 2) {
      recover_not_before_ =
          now + std::chrono::milliseconds(250 << std::min<uint64_t>(recent_recovers_ - 2, 4));
    }
  }
  // A version of another journal than the held one's (the journal was recreated under the
  // group): what is held is not one of the group's versions any more.
  if (target && !journal.empty() && current_ && journal != current_journal_) from_anchor = true;
  if (target && from_anchor) {
    reload_from_anchor_ = true;
    target_ = *target;  // may be older than what is held: the held version is void
    retry_requested_ = true;
    cv_.notify_all();
  }
  if (!target) return;
  if (!target_ || *target > *target_) target_ = *target;
  retry_requested_ = retry_requested_ || retry || (current_ && *current_ >= *target);
  cv_.notify_all();
}

void Subscriber::check_claim() {
  claim_pending_ = false;
  const uint64_t v = *options_.claimed_version;
  Status adopted = reader_->adopt(v);
  if (options_.log) {
    options_.log(adopted.ok() ? "subscriber: the engine's tensors hold v" + std::to_string(v) +
                                    " as claimed (every checksum verified)"
                              : "subscriber: not trusting the claimed v" + std::to_string(v) +
                                    " (" + adopted.message() + "); loading an anchor in place");
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.claim_verified = adopted.ok();
}

void Subscriber::attempt(uint64_t target) {
  const auto started = std::chrono::steady_clock::now();
  bool reload;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reload = std::exchange(reload_from_anchor_, false);
  }
  if (reload) reader_->forget();
  if (claim_pending_ && !reload) check_claim();
  const std::optional<uint64_t> before = reader_->held();
  const uint64_t written_before = reader_->bytes_written();
  uint64_t bytes_read = 0;
  std::string how = "fs";
  Result<CatchUpReport> report = failed_precondition("not attempted");
  std::optional<Status> live;
  if (!reload) live = apply_over_live_paths(target, &bytes_read, &how);
  if (live) {
    if (live->ok()) {
      CatchUpReport r;
      r.version = target;
      r.deltas_applied = target - *before;
      report = r;
    } else {
      report = *live;
    }
  } else {
    report = reader_->catch_up(target);
  }
  const uint64_t written = reader_->bytes_written() - written_before;
  // What the engine's tensors hold now, whatever the outcome: the target, the version before
  // (a failure reverted), a version on the way, or none (an anchor failed while loading).
  const std::optional<uint64_t> held = reader_->held();
  std::vector<uint64_t> checksums;
  if (held) {
    for (size_t i = 0; i < tensors_.size(); ++i) checksums.push_back(reader_->checksum(i));
  }
  const uint64_t apply_us =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - started)
                                .count());
  proto::Envelope e;
  if (!report.ok()) {
    proto::Nack& nack = *e.mutable_nack();
    nack.set_version(target);
    nack.set_rank(options_.rank);
    nack.set_reason(report.status().message().substr(0, 2000));
    const std::string doing = "cannot reach v" + std::to_string(target);
    nack_log_->log("nack", "subscriber: " + doing + ": " + report.status().message(),
                   "subscriber: {} more nacks", doing + ": " + report.status().message());
  } else {
    proto::Ack& ack = *e.mutable_ack();
    ack.set_version(report->version);
    ack.set_rank(options_.rank);
    ack.set_apply_us(apply_us);
    ack.set_bytes_read(bytes_read);
    ack.set_transport(how);
    ack.set_bytes_written(written);
    ack.set_peak_rss_bytes(process_peak_rss_bytes());
    ack.set_engine_bytes(engine_bytes_);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      proto::TensorChecksum& c = *ack.add_checksums();
      c.set_name(tensors_[i].name);
      c.set_checksum(checksums[i]);
    }
    forget_live_through(report->version);  // what live paths keep for held versions is not needed
  }
  {
    // One update, so that whoever wakes on current_ sees the stats of the same attempt.
    std::lock_guard<std::mutex> lock(mu_);
    current_ = held;
    current_journal_ = held ? reader_->held_journal_id() : std::string();
    current_checksums_ = checksums;
    stats_.last_bytes_written = written;
    stats_.bytes_written += written;
    if (!report.ok()) {
      ++stats_.nacks;
    } else {
      ++stats_.versions_applied;
      stats_.anchors_loaded += report->anchors_loaded;
      stats_.last_apply_us = apply_us;
      stats_.last_transport = how;
      stats_.versions_by_path[how] += report->version - before.value_or(report->version);
    }
    cv_.notify_all();
  }
  link_->send(std::move(e));
}

void Subscriber::worker() {
  auto backoff = std::chrono::milliseconds(0);
  std::chrono::steady_clock::time_point not_before{};
  while (true) {
    uint64_t target;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto earliest = std::max(not_before, recover_not_before_);
      cv_.wait_until(lock,
                     earliest > std::chrono::steady_clock::now()
                         ? earliest
                         : std::chrono::steady_clock::now() + std::chrono::hours(1),
                     [&] {
                       return stopping_ ||
                              (target_ && (!current_ || *current_ < *target_ || retry_requested_) &&
                               std::chrono::steady_clock::now() >= earliest);
                     });
      if (stopping_) return;
      if (!target_ || (current_ && *current_ >= *target_ && !retry_requested_) ||
          std::chrono::steady_clock::now() < std::max(not_before, recover_not_before_)) {
        continue;
      }
      target = *target_;
      retry_requested_ = false;
    }
    const uint64_t nacks_before = stats().nacks;
    attempt(target);
    if (stats().nacks > nacks_before) {
      backoff = std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(4000),
          backoff.count() ? backoff * 2 : std::chrono::milliseconds(250));
      not_before = std::chrono::steady_clock::now() + backoff;
    } else {
      backoff = std::chrono::milliseconds(0);
      not_before = {};
    }
  }
}

std::optional<uint64_t> Subscriber::current_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

Status Subscriber::wait_for_version(uint64_t version, EndpointDeadline deadline) const {
  return wait_until(current_, version, deadline, "reached");
}

Status Subscriber::wait_until(const std::optional<uint64_t>& which, uint64_t version,
                              EndpointDeadline deadline, const char* what) const {
  std::unique_lock<std::mutex> lock(mu_);
  const bool reached = cv_.wait_until(lock, deadline, [&] {
    return (which && *which >= version) || (link_ && link_->fatal_error());
  });
  if (link_ && link_->fatal_error()) return failed_precondition(*link_->fatal_error());
  if (!reached) {
    return deadline_exceeded(
        "rank " + std::to_string(options_.rank) + ": version " + std::to_string(version) + " not " +
        what + " before the deadline (holds " + (current_ ? std::to_string(*current_) : "nothing") +
        ", committed " + (committed_ ? std::to_string(*committed_) : "nothing") + ")");
  }
  return ok_status();
}

std::optional<uint64_t> Subscriber::committed_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

Status Subscriber::wait_committed(uint64_t version, EndpointDeadline deadline) const {
  return wait_until(committed_, version, deadline, "committed to it");
}

SubscriberStats Subscriber::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::optional<std::string> Subscriber::fatal_error() const {
  return link_ ? link_->fatal_error() : std::nullopt;
}

uint64_t Subscriber::checksum(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return i < current_checksums_.size() ? current_checksums_[i] : 0;
}

void Subscriber::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  stop_live_paths();  // a worker waiting on a live path returns
  if (worker_.joinable()) worker_.join();
  if (link_) link_->stop(reason);
}

}  // namespace weightcast
