#include "src/daemon/shard_demo.h"

#include <chrono>
#include <fstream>
#include <thread>

#include "src/daemon/demo_trainer.h"
#include "src/daemon/synthetic_model.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/rank_plan.h"
#include "transport/fs/step_commit.h"

namespace weightcast {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// The first version this rank publishes: the lead's current one when it restarted into a
// running group, else the one after the journal's head, else start_version.
uint64_t first_version(const proto::GroupConfig& config, const DaemonOptions& options) {
  const JournalLayout layout(config.journal_root());
  if (auto planned = newest_rank_plan(layout)) return *planned;
  auto head = read_journal_head(layout);
  return head.ok() && *head ? (**head).version() + 1 : options.start_version;
}

}  // namespace

std::vector<ShardSpan> even_shard(const std::vector<uint64_t>& numels, uint32_t shard,
                                  uint32_t shards) {
  uint64_t total = 0;
  for (const uint64_t n : numels) total += n;
  // 128-bit products: a model of 2^40 elements times 4096 shards stays exact.
  const auto bound = [&](uint64_t k) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(total) * k / shards);
  };
  const uint64_t lo = bound(shard), hi = bound(shard + 1);
  std::vector<ShardSpan> spans;
  uint64_t start = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const uint64_t end = start + numels[i];
    const uint64_t a = std::max(lo, start), b = std::min(hi, end);
    if (a < b) spans.push_back({i, a - start, b - a});
    start = end;
  }
  return spans;
}

Status run_shard_publisher_rank(const proto::GroupConfig& config, const DaemonOptions& options,
                                const ShardPlace& place) {
  const proto::DemoModel& demo = config.demo();
  const std::string me = "publisher rank " + std::to_string(options.rank) + " (shard " +
                         std::to_string(place.shard) + " of " + std::to_string(place.shards) + ")";
  if (!demo.publisher_mode().empty() && demo.publisher_mode() != "snapshot") {
    return invalid_argument(me + ": demo.publisher_mode " + demo.publisher_mode() +
                            " is for one publisher rank; several publish in snapshot mode");
  }
  ThreadPool pool(options.threads);
  ASSIGN_OR_RETURN(std::unique_ptr<SyntheticModel> model,
                   SyntheticModel::create(demo.parameters(), demo.density(), demo.seed(), &pool));
  const std::vector<TensorRef> refs = model->tensor_refs();
  std::vector<SafetensorsTensorSpec> specs;
  std::vector<uint64_t> numels;
  for (const TensorRef& r : refs) {
    specs.push_back({r.name, r.dtype, r.shape});
    numels.push_back(r.numel());
  }
  std::vector<OwnedRange> ranges;
  uint64_t owned = 0;
  std::vector<bool> mine(refs.size(), false);
  for (const ShardSpan& s : even_shard(numels, place.shard, place.shards)) {
    mine[s.tensor] = true;
    const TensorRef& r = refs[s.tensor];
    const auto* base = static_cast<const uint8_t*>(r.data) + r.offset * r.element_size();
    ranges.push_back({r.name, s.first, s.count, base + s.first * r.element_size()});
    owned += s.count;
  }
  model->step_only(std::move(mine));  // as a trainer rank steps only its own shard
  ShardPublisherOptions so;
  so.rank = options.rank;
  so.threads = options.threads;
  so.log = options.log;
  ASSIGN_OR_RETURN(std::unique_ptr<ShardPublisher> publisher,
                   ShardPublisher::start(config, so, std::move(specs), std::move(ranges)));
  say(options, me + ": owns " + std::to_string(owned) + " of " +
                   std::to_string(model->parameters()) + " elements in " +
                   std::to_string(publisher->shards()) + " shards");
  // The lead times each version for `weightcast bench group` (docs/CONFIG.md demo.figures_path).
  std::ofstream figures;
  if (publisher->lead() && !demo.figures_path().empty()) {
    figures.open(demo.figures_path(), std::ios::app);
    if (!figures)
      return failed_precondition("cannot open demo.figures_path " + demo.figures_path());
  }
  const uint64_t last = options.start_version + std::max<uint64_t>(1, demo.versions());
  const auto commit_wait = milliseconds(2 * config.timeouts().ack_timeout_ms() + 10000);
  const JournalLayout layout(config.journal_root());
  // Until `v` is committed; with `or_passed`, also once the lead has announced a later version
  // (it gave up on v, and waits for this rank's part of the next).
  const auto until_committed = [&](uint64_t v, bool or_passed = false) -> Status {
    const auto deadline = SteadyClock::now() + commit_wait;
    for (;;) {
      Status s = publisher->wait_committed(v, SteadyClock::now() + milliseconds(200));
      if (s.code() != StatusCode::kDeadlineExceeded || stopping(options) ||
          SteadyClock::now() >= deadline) {
        return s;
      }
      if (auto plan = or_passed ? newest_rank_plan(layout) : std::nullopt; plan && *plan > v) {
        return ok_status();
      }
    }
  };
  // A bench run (demo.figures_path) paces every rank as the lead is paced: a rank steps its
  // model for the next version once the last one is committed, so no training step runs while
  // the engines apply (on one machine they would share its cores).
  const bool paced = !demo.figures_path().empty();
  std::optional<uint64_t> published;
  bool failed = false;
  for (uint64_t v = first_version(config, options); v <= last && !stopping(options); ++v) {
    // After a failure (the lead gave up, or went on while this rank waited), join its version.
    if (failed && !publisher->lead()) v = std::max(v, first_version(config, options));
    if (paced && published) RETURN_IF_ERROR(until_committed(*published, !publisher->lead()));
    model->fast_forward(v - options.start_version);
    const auto started = SteadyClock::now();
    auto report = publisher->publish(v);
    failed = !report.ok();
    if (!report.ok()) {
      say(options, me + ": v" + std::to_string(v) + " not published: " + report.status().message());
      continue;
    }
    published = v;
    DemoStepFigures f;
    f.version = v;
    f.anchor = report->anchor;
    f.stored_bytes = report->commit ? report->commit->stored_bytes : report->stored_bytes;
    f.publish_s = std::chrono::duration<double>(SteadyClock::now() - started).count();
    say(options, me + ": v" + std::to_string(v) + (f.anchor ? " anchor" : " delta") + ", " +
                     std::to_string(report->stored_bytes) + " bytes of its own, " +
                     std::to_string(f.publish_s) + " s");
    if (figures.is_open()) {
      figures << demo_figures_line(f, model->parameters() * kSyntheticModelBytesPerParameter)
              << std::endl;
    }
    if (demo.step_interval_ms()) std::this_thread::sleep_for(milliseconds(demo.step_interval_ms()));
  }
  if (published && !stopping(options)) {
    Status s = until_committed(*published);
    if (!s.ok() && !stopping(options)) return s;
    if (s.ok()) say(options, me + ": v" + std::to_string(*published) + " committed");
  }
  // A bench run (demo.figures_path) reads every rank's VmHWM at its end (examples/group_demo.cc):
  // only the lead's peak travels in an offer, so every rank stays until it is stopped.
  const bool stay = options.stay || !demo.figures_path().empty();
  while (stay && !stopping(options)) std::this_thread::sleep_for(milliseconds(100));
  publisher->stop(stopping(options) ? "SIGTERM" : "done");
  return ok_status();
}

}  // namespace weightcast
