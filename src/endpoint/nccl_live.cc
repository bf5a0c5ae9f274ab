#include "src/endpoint/nccl_live.h"

#include <cstdlib>
#include <utility>
#include <vector>

#include "codec/cuda_codec.h"
#include "src/control/group_config_nccl.h"
#include "src/control/messages.h"
#include "transport/fs/journal_files.h"
#include "transport/nccl/broadcast_round.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_NCCL
#include "transport/nccl/nccl_broadcast_group.h"
#include "transport/nccl/nccl_library.h"
#endif

namespace weightcast {
namespace {

using Clock = std::chrono::steady_clock;
// Received rounds a subscriber keeps for its worker: a few versions in flight; each may hold
// a whole delta (~430 MiB for a 30 B model at 1 %), and applied ones are forgotten at once.
constexpr size_t kKeptRounds = 8;

}  // namespace

std::chrono::milliseconds nccl_timeout(const proto::NcclConfig& config) {
  return std::chrono::milliseconds(config.timeout_ms() ? config.timeout_ms()
                                                       : kDefaultNcclTimeoutMs);
}

Result<std::unique_ptr<nccl::BroadcastGroupFactory>> make_nccl_groups(
    const proto::NcclConfig& config, int device) {
#if WEIGHTCAST_HAVE_NCCL
  std::string why;
  if (!cuda_codec::device_usable(&why)) {
    return failed_precondition("nccl: no usable CUDA device (" + why + ")");
  }
  // Before NCCL reads its environment (the first communicator); the config wins over the
  // process's own values so that every rank of the group runs with the same settings.
  for (const auto& [name, value] : config.env()) ::setenv(name.c_str(), value.c_str(), 1);
  auto lib = nccl::load_nccl();
  if (!lib.ok()) return failed_precondition("nccl: " + lib.status().message());
  nccl::NcclBroadcastGroupOptions options;
  options.device = device;
  if (config.bucket_bytes()) options.bucket_bytes = config.bucket_bytes();
  if (config.buffers()) options.buffers = config.buffers();
  return std::unique_ptr<nccl::BroadcastGroupFactory>(
      std::make_unique<nccl::NcclBroadcastGroupFactory>(options));
#else
  (void)config;
  (void)device;
  return failed_precondition("nccl: this build has no NCCL (nccl.h was not found)");
#endif
}

NcclLive::NcclLive(std::unique_ptr<nccl::BroadcastGroupFactory> groups, NcclLiveOptions options)
    : groups_(std::move(groups)), options_(std::move(options)) {}

NcclLive::~NcclLive() {
  shutdown();
  executor_.stop();  // drops the queued tasks; the running one returns, its group aborted
  drop_group("rank " + std::to_string(options_.rank) + " stopped");
}

void NcclLive::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  if (group_) group_->abort("rank " + std::to_string(options_.rank) + " is stopping");
  cv_.notify_all();
}

std::string NcclLive::describe() const {
  return "nccl (" + groups_->name() + " groups, " + std::to_string(options_.timeout.count()) +
         " ms deadline per join and round)";
}

void NcclLive::on_epoch(const proto::NcclEpoch& m) {
  std::lock_guard<std::mutex> lock(mu_);
  // Ready at once when this rank holds the epoch's group (it reported its join after taking
  // it), so a version served right after the ready goes in the epoch.
  if (m.stage() == proto::NCCL_READY && group_ && group_epoch_ == m.epoch()) {
    ready_epoch_ = m.epoch();
  }
  if (m.stage() == proto::NCCL_END) {
    if (ready_epoch_ == m.epoch()) ready_epoch_ = 0;
    if (group_ && group_epoch_ == m.epoch()) {
      group_->abort("epoch " + std::to_string(m.epoch()) + " ended: " + m.reason());
    }
  }
  Task t;
  t.stage = m;
  post(std::move(t));
}

uint64_t NcclLive::ready_epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_epoch_;
}

void NcclLive::send_version(uint64_t epoch, uint64_t version,
                            std::shared_ptr<const DeltaInMemory> delta) {
  std::lock_guard<std::mutex> lock(mu_);
  post({Task::Kind::kSend, {}, epoch, version, std::move(delta)});
}

void NcclLive::receive_version(uint64_t epoch, uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  received_[version].reset();
  while (received_.size() > kKeptRounds) received_.erase(received_.begin());
  post({Task::Kind::kReceive, {}, epoch, version, nullptr});
}

std::optional<Result<FetchedDelta>> NcclLive::take_received(uint64_t version,
                                                            Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = received_.find(version);
  if (it == received_.end()) return std::nullopt;
  const bool done = cv_.wait_until(lock, deadline, [&] {
    it = received_.find(version);
    return it == received_.end() || it->second.has_value() || stopping_;
  });
  if (it == received_.end()) return std::nullopt;  // forgotten meanwhile: the journal
  if (!done || !it->second) {
    return Result<FetchedDelta>(deadline_exceeded(
        "nccl round of version " + std::to_string(version) + " did not end in time"));
  }
  Result<std::optional<FetchedDelta>> r = std::move(*it->second);
  received_.erase(it);
  if (!r.ok()) return Result<FetchedDelta>(r.status());
  if (!r->has_value()) return std::nullopt;
  return Result<FetchedDelta>(std::move(**r));
}

void NcclLive::forget_through(uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  received_.erase(received_.begin(), received_.upper_bound(version));
  cv_.notify_all();
}

void NcclLive::post(Task t) {
  // After shutdown the executor still takes tasks until it stops; run() skips them.
  (void)executor_.post([this, t = std::move(t)] { run(t); });
}

void NcclLive::run(const Task& t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
  }
  if (t.kind == Task::Kind::kStage) run_stage(t.stage);
  if (t.kind == Task::Kind::kSend) run_send(t);
  if (t.kind == Task::Kind::kReceive) run_receive(t);
}

void NcclLive::report(uint64_t epoch, proto::NcclStage stage, const Status& outcome,
                      const std::string& group_id, uint64_t version) {
  proto::Envelope e;
  proto::NcclReport& r = *e.mutable_nccl_report();
  r.set_epoch(epoch);
  r.set_stage(stage);
  r.set_ok(outcome.ok());
  if (!outcome.ok()) r.set_reason(outcome.message().substr(0, 2000));
  r.set_group_id(group_id);
  r.set_version(version);
  if (options_.log && !outcome.ok()) {
    options_.log("nccl: epoch " + std::to_string(epoch) + " " +
                 std::string(nccl_stage_name(stage)) + " failed: " + outcome.message());
  }
  if (options_.send) options_.send(std::move(e));
}

void NcclLive::drop_group(const std::string& why) {
  std::shared_ptr<nccl::BroadcastGroup> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = std::exchange(group_, nullptr);
    if (ready_epoch_ == group_epoch_) ready_epoch_ = 0;
    group_epoch_ = 0;
  }
  if (g) g->abort(why);  // idempotent; the group's destructor then frees it
}

void NcclLive::run_stage(const proto::NcclEpoch& m) {
  const uint64_t epoch = m.epoch();
  switch (m.stage()) {
    case proto::NCCL_MAKE_ID: {
      auto id = groups_->make_id();
      report(epoch, proto::NCCL_MAKE_ID, id.status(), id.ok() ? *id : std::string());
      return;
    }
    case proto::NCCL_JOIN: {
      drop_group("epoch " + std::to_string(epoch) + " replaces it");
      int me = -1;
      for (int i = 0; i < m.ranks_size(); ++i) {
        if (m.ranks(i) == options_.rank) me = i;
      }
      if (me < 0) {
        report(epoch, proto::NCCL_JOIN,
               invalid_argument("rank " + std::to_string(options_.rank) +
                                " is not among the epoch's ranks"));
        return;
      }
      auto g = groups_->join(m.group_id(), m.ranks_size(), me, Clock::now() + options_.timeout);
      if (g.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        group_ = std::shared_ptr<nccl::BroadcastGroup>(std::move(g).value());
        group_epoch_ = epoch;
      }
      report(epoch, proto::NCCL_JOIN, g.status());
      if (g.ok() && options_.log) {
        options_.log("nccl: joined epoch " + std::to_string(epoch) + " as NCCL rank " +
                     std::to_string(me) + " of " + std::to_string(m.ranks_size()));
      }
      return;
    }
    case proto::NCCL_READY: {
      std::lock_guard<std::mutex> lock(mu_);
      if (group_ && group_epoch_ == epoch) ready_epoch_ = epoch;
      return;
    }
    case proto::NCCL_END:
      if (group_epoch_ == epoch) drop_group("epoch " + std::to_string(epoch) + " ended");
      return;
    default:
      return;
  }
}

void NcclLive::run_send(const Task& t) {
  std::shared_ptr<nccl::BroadcastGroup> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (group_epoch_ == t.epoch) g = group_;
  }
  const std::string what = "version " + std::to_string(t.version);
  if (!g) {
    if (options_.log) options_.log("nccl: " + what + " not broadcast: its epoch is over");
    return;
  }
  std::vector<uint8_t> manifest;
  std::vector<nccl::RoundPart> parts;
  if (t.delta && t.delta->parts.size() == static_cast<size_t>(t.delta->manifest.parts_size())) {
    manifest = frame_journal_message(JournalFileKind::kManifest, t.delta->manifest);
    parts.push_back({kLiveManifestPart, manifest});
    for (size_t i = 0; i < t.delta->parts.size(); ++i) {
      parts.push_back({t.delta->manifest.parts(static_cast<int>(i)).file(), t.delta->parts[i]});
    }
  }
  auto sent = nccl::run_round(*g, 0, t.version, parts, false, {}, Clock::now() + options_.timeout);
  if (!sent.ok()) {
    report(t.epoch, proto::NCCL_ROUND,
           Status(sent.status().code(), what + ": " + sent.status().message()), "", t.version);
    drop_group(what + " failed");
  }
}

void NcclLive::run_receive(const Task& t) {
  std::shared_ptr<nccl::BroadcastGroup> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (group_epoch_ == t.epoch) g = group_;
  }
  const std::string what = "nccl version " + std::to_string(t.version);
  auto outcome = [&]() -> Result<std::optional<FetchedDelta>> {
    if (!g) {
      return failed_precondition(what + ": epoch " + std::to_string(t.epoch) +
                                 " is not held here (it ended, or this rank did not join it)");
    }
    ASSIGN_OR_RETURN(nccl::ReceivedRound round,
                     nccl::run_round(*g, 0, 0, {}, true, {}, Clock::now() + options_.timeout));
    if (round.version != t.version) {
      return data_loss(what + ": the round carried version " + std::to_string(round.version) +
                       " (the rank is out of step with its epoch)");
    }
    if (round.parts.empty()) return std::optional<FetchedDelta>();  // read the journal
    if (round.parts[0].name != kLiveManifestPart) {
      return data_loss(what + ": its first part is '" + round.parts[0].name + "', not " +
                       kLiveManifestPart);
    }
    FetchedDelta out;
    ASSIGN_OR_RETURN(out.manifest, parse_manifest(round.parts[0].bytes, what + " MANIFEST"));
    std::vector<std::string> served;
    for (const auto& p : round.parts) served.push_back(p.name);
    RETURN_IF_ERROR(check_live_delta_parts(what, t.version, out.manifest, served));
    for (size_t i = 1; i < round.parts.size(); ++i) {
      out.parts.push_back(std::move(round.parts[i].bytes));
    }
    out.bytes_read = round.bytes;
    return std::optional<FetchedDelta>(std::move(out));
  }();
  if (!outcome.ok() && g) {
    report(t.epoch, proto::NCCL_ROUND, outcome.status(), "", t.version);
    drop_group(what + " failed");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = received_.find(t.version);
  if (it != received_.end()) it->second = std::move(outcome);
  cv_.notify_all();
}

}  // namespace weightcast
