#include "src/daemon/rank_roles.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "src/control/coordinator.h"
#include "src/daemon/demo_trainer.h"
#include "src/daemon/shard_demo.h"
#include "src/daemon/synthetic_model.h"
#include "src/endpoint/publisher.h"
#include "src/endpoint/subscriber.h"

namespace weightcast {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

}  // namespace

Status run_coordinator_rank(const proto::GroupConfig& config, const DaemonOptions& options) {
  CoordinatorOptions co;
  co.log = options.log;
  co.listen_fd = options.listen_fd;
  ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> coordinator, Coordinator::start(config, co));
  say(options, "coordinator: serving on " + coordinator->endpoint());
  while (!stopping(options)) RETURN_IF_ERROR(coordinator->step(milliseconds(50)));
  say(options, "coordinator: stopping");
  return ok_status();
}

Status run_publisher_rank(const proto::GroupConfig& config, const DaemonOptions& options) {
  const proto::DemoModel& demo = config.demo();
  if (demo.parameters() == 0) {
    return invalid_argument("rank " + std::to_string(options.rank) +
                            " is a publisher without a trainer: the config needs a demo: "
                            "section (parameters, density, versions) to publish");
  }
  // Several publisher ranks: each publishes its shard (src/daemon/shard_demo.h).
  ASSIGN_OR_RETURN(const ShardPlace place, shard_place(config, options.rank));
  if (place.shards > 1) return run_shard_publisher_rank(config, options, place);
  PublisherOptions po;
  po.rank = options.rank;
  po.threads = options.threads;
  po.log = options.log;
  // The model first: one this host cannot hold is refused before the rank joins the group.
  ThreadPool pool(options.threads);
  const auto built = SteadyClock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<SyntheticModel> built_model,
                   SyntheticModel::create(demo.parameters(), demo.density(), demo.seed(), &pool));
  SyntheticModel& model = *built_model;
  say(options,
      "publisher: synthetic MoE model, " + std::to_string(model.parameters()) +
          " bf16 parameters in " + std::to_string(model.tensor_count()) + " tensors (" +
          std::to_string(std::chrono::duration<double>(SteadyClock::now() - built).count()) +
          " s to build)");
  ASSIGN_OR_RETURN(std::unique_ptr<Publisher> publisher, Publisher::start(config, po));
  ASSIGN_OR_RETURN(std::unique_ptr<DemoTrainer> trainer,
                   DemoTrainer::create(&model, publisher.get(), demo.publisher_mode()));
  if (trainer->hooked()) say(options, "publisher: the demo trainer writes through hooked steps");
  // With demo.figures_path the trainer times each version (src/daemon/demo_trainer.h) and
  // publishes them one at a time: the next version starts once this one is published.
  std::ofstream figures;
  if (!demo.figures_path().empty()) {
    figures.open(demo.figures_path(), std::ios::app);
    if (!figures)
      return failed_precondition("cannot open demo.figures_path " + demo.figures_path());
  }
  const uint64_t trainer_bytes =
      model.parameters() * kSyntheticModelBytesPerParameter + trainer->scratch_bytes();

  uint64_t next = options.start_version;
  if (auto head = publisher->head()) {
    next = *head + 1;
    say(options, "publisher: journal head is v" + std::to_string(*head) +
                     "; replaying the model's steps to continue at v" + std::to_string(next));
  }
  const uint64_t last = options.start_version + std::max<uint64_t>(1, demo.versions());
  std::optional<PublishHandle> last_handle;
  // Waits in short slices, so that SIGTERM ends any of them within a second (the caller
  // then stops the publisher, which gives up waiting for credit).
  const auto until_published = [&](const PublishHandle& h) -> Result<PublishReport> {
    const auto deadline = SteadyClock::now() + std::chrono::hours(1);
    while (true) {
      auto report = h.wait_published(std::min(deadline, SteadyClock::now() + milliseconds(200)));
      if (report.ok() || report.status().code() != StatusCode::kDeadlineExceeded ||
          SteadyClock::now() >= deadline) {
        return report;
      }
      if (stopping(options)) {
        return failed_precondition("stopping: v" + std::to_string(h.version()) + " not published");
      }
    }
  };
  const auto until_read = [&](const PublishHandle& h) -> Status {
    const auto deadline = SteadyClock::now() + std::chrono::hours(1);
    while (true) {
      Status s = h.wait_for_reads(std::min(deadline, SteadyClock::now() + milliseconds(200)));
      if (s.ok() || s.code() != StatusCode::kDeadlineExceeded || SteadyClock::now() >= deadline ||
          stopping(options)) {
        return s;
      }
    }
  };
  const auto log_published = [&](const PublishHandle& h) -> Status {
    auto published = until_published(h);
    if (!published.ok() && stopping(options)) return ok_status();
    ASSIGN_OR_RETURN(PublishReport report, std::move(published));
    say(options, "publisher: v" + std::to_string(h.version()) +
                     (report.anchor ? " anchor" : " delta") + ", " +
                     std::to_string(report.stored_bytes) + " bytes, " +
                     std::to_string(report.changed_elements) + " changed elements, " +
                     std::to_string(report.seconds) + " s");
    return ok_status();
  };
  for (uint64_t v = next; v <= last && !stopping(options); ++v) {
    DemoStepFigures f;
    if (figures.is_open() && last_handle) {
      // Credit for v is there before it is timed.
      const auto deadline =
          SteadyClock::now() + milliseconds(2 * config.timeouts().ack_timeout_ms() + 10000);
      Status s = ok_status();
      do {
        s = last_handle->wait_committed(SteadyClock::now() + milliseconds(200));
      } while (s.code() == StatusCode::kDeadlineExceeded && !stopping(options) &&
               SteadyClock::now() < deadline);
      if (stopping(options)) break;
      RETURN_IF_ERROR(s);
      last_handle.reset();
    }
    const auto made = SteadyClock::now();
    ASSIGN_OR_RETURN(PublishHandle handle, trainer->make_version(v, v - options.start_version, &f));
    if (figures.is_open()) {
      const auto queued = SteadyClock::now();
      auto published = until_published(handle);
      if (!published.ok() && stopping(options)) break;
      RETURN_IF_ERROR(published.status());
      f.publish_s = std::chrono::duration<double>(SteadyClock::now() - queued).count();
      f.anchor = published->anchor;
      f.stored_bytes = published->stored_bytes;
      say(options, "publisher: v" + std::to_string(v) + (f.anchor ? " anchor" : " delta") +
                       ", made in " +
                       std::to_string(std::chrono::duration<double>(queued - made).count()) +
                       " s, published in " + std::to_string(f.publish_s) + " s");
      figures << demo_figures_line(f, trainer_bytes) << std::endl;
      last_handle = handle;
      continue;
    }
    // The trainer's next step must not start before the publisher has read the weights; it
    // then overlaps with the journal write of this version.
    Status read = until_read(handle);
    if (!read.ok() && stopping(options)) break;
    RETURN_IF_ERROR(read);
    if (last_handle) RETURN_IF_ERROR(log_published(*last_handle));
    last_handle = handle;
    if (demo.step_interval_ms()) std::this_thread::sleep_for(milliseconds(demo.step_interval_ms()));
  }
  if (last_handle && !stopping(options) && !figures.is_open()) {
    RETURN_IF_ERROR(log_published(*last_handle));
  }
  if (last_handle && !stopping(options)) {
    // Bounded: a group without live subscribers commits at once.
    const auto deadline =
        SteadyClock::now() + milliseconds(2 * config.timeouts().ack_timeout_ms() + 10000);
    while (!stopping(options)) {
      Status s = last_handle->wait_committed(SteadyClock::now() + milliseconds(200));
      if (s.ok()) {
        say(options, "publisher: v" + std::to_string(last_handle->version()) + " committed");
        break;
      }
      if (s.code() != StatusCode::kDeadlineExceeded || SteadyClock::now() > deadline) return s;
    }
  }
  while (options.stay && !stopping(options)) std::this_thread::sleep_for(milliseconds(100));
  publisher->stop(stopping(options) ? "SIGTERM" : "done");
  return ok_status();
}

Status run_subscriber_rank(const proto::GroupConfig& config, const DaemonOptions& options) {
  SubscriberOptions so;
  so.rank = options.rank;
  so.threads = options.threads;
  so.log = options.log;
  so.after_apply = [&options](uint64_t v) {
    say(options, "subscriber: holds v" + std::to_string(v));
  };
  ASSIGN_OR_RETURN(std::unique_ptr<Subscriber> subscriber, Subscriber::create(config, so));
  // Without an engine to register tensors, the journal says what the model is.
  {
    Status s = subscriber->register_from_journal(SteadyClock::now() + std::chrono::hours(24),
                                                 [&options] { return stopping(options); });
    if (!s.ok() && stopping(options)) return ok_status();
    RETURN_IF_ERROR(s);
  }
  say(options, "subscriber: " + std::to_string(subscriber->tensors().size()) +
                   " tensors registered from the journal");
  RETURN_IF_ERROR(subscriber->connect());
  while (!stopping(options)) {
    if (auto fatal = subscriber->fatal_error()) return failed_precondition(*fatal);
    std::this_thread::sleep_for(milliseconds(50));
  }
  subscriber->stop("SIGTERM");
  return ok_status();
}

}  // namespace weightcast
