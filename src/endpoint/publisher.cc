#include "src/endpoint/publisher.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "src/endpoint/group_journal.h"
#include "transport/tensor_staging.h"

namespace weightcast {

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
  credit_ = std::make_unique<GroupCredit>(config_.max_in_flight(), config_.coordinator_endpoint(),
                                          options_.log);
}

Result<std::unique_ptr<Publisher>> Publisher::start(const proto::GroupConfig& config,
                                                    PublisherOptions options) {
  std::unique_ptr<Publisher> p(new Publisher(config, std::move(options)));
  p->pool_ = std::make_unique<ThreadPool>(p->options_.threads);
  ASSIGN_OR_RETURN(JournalOptions journal,
                   group_journal_options(config, p->pool_.get(), p->options_.log));
  if (config.fp8().enabled()) {
    const std::vector<std::string> patterns(config.fp8().quantize().begin(),
                                            config.fp8().quantize().end());
    ASSIGN_OR_RETURN(p->fp8_, Fp8Selection::compile(patterns, "fp8.quantize"));
    journal.anchor.config_json =
        "{\"quantization_config\": " + fp8_quantization_config_json() + "}";
  }
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
  p->executor_ = std::make_unique<SerialExecutor>(SerialExecutor::OnStop::kRunQueued);
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
  for (size_t k = 0; k < tensors_.size(); ++k) {
    if (tensors_[k].name != ref.name) continue;
    const bool scales = std::any_of(fp8_sources_.begin(), fp8_sources_.end(),
                                    [k](const Fp8Source& f) { return f.scale == k; });
    return invalid_argument("tensor '" + ref.name + "' registered twice" +
                            (scales ? " (it names an FP8 tensor's scales)" : ""));
  }
  if (fp8_ && fp8_->selects(ref.name)) return register_fp8(ref, updates);
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
  RETURN_IF_ERROR(enqueue(job));
  return PublishHandle(job, this);
}

Status Publisher::enqueue(const std::shared_ptr<PublishJob>& job) {
  // Under mu_, after stopping_ was found false: stop() sets it under mu_ before it stops the
  // executor, so the post is taken.
  queue_.push_back(job);  // before the post: the job may start at once, and pops it
  if (!executor_->post([this, job] { run_queued(job); })) {
    queue_.pop_back();
    return failed_precondition("publisher is stopping: version " + std::to_string(job->version) +
                               " was not queued");
  }
  last_queued_ = job->version;
  any_queued_ = true;
  cv_.notify_all();
  return ok_status();
}

std::optional<uint64_t> Publisher::head() const {
  std::lock_guard<std::mutex> lock(mu_);
  return head_;
}

std::optional<uint64_t> Publisher::committed() const {
  return credit_->committed();
}

Status Publisher::wait_committed(uint64_t version, EndpointDeadline deadline) const {
  return credit_->wait_committed(version, deadline, [this] { return link_->fatal_error(); });
}

void Publisher::on_message(const proto::Envelope& m) {
  for (const auto& path : live_) {
    if (path->on_control_message(m)) return;
  }
  credit_->on_message(m);
}

Status Publisher::wait_for_credit(uint64_t version) {
  return credit_->wait_for_credit(version, options_.credit_timeout);
}

void Publisher::run_queued(const std::shared_ptr<PublishJob>& job) {
  Status status = run_job(*job);
  if (!status.ok() && options_.log) {
    options_.log("publisher: version " + std::to_string(job->version) +
                 " failed: " + status.message());
  }
  {
    // A later queued version follows the last good one (as an anchor when not consecutive).
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();  // job: the executor runs them in the order they were queued
    cv_.notify_all();    // begin_step of an anchor version waits for an empty queue
  }
  std::lock_guard<std::mutex> lock(job->mu);
  job->status = status;
  job->done = true;
  job->cv.notify_all();
}

void Publisher::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  credit_->stop();  // queued jobs fail fast (wait_for_credit), so the executor stops soon
  if (executor_) executor_->stop();  // each queued job still ends, and its handle with it
  if (link_) link_->stop(reason);
}

}  // namespace weightcast
