// The live paths of the subscriber (subscriber.h, src/endpoint/live_path.h): the paths are
// started at connect(), see every message first, and deliver the deltas of the versions
// whose Offers carried their descriptors, applied with the journal's checks
// (CatchUpReader::apply_delta_from). Nothing here knows a path by name.
#include <algorithm>
#include <utility>

#include "src/endpoint/subscriber.h"
#include "transport/fs/catch_up_reader.h"

namespace weightcast {
namespace {

// Versions whose descriptors are kept for the worker: a few in flight, and a worker that
// falls further behind catches up through the journal anyway.
constexpr size_t kKeptVersions = 16;

}  // namespace

void Subscriber::start_live_paths(RankLinkOptions* link) {
  LivePathRank rank;
  rank.rank = options_.rank;
  rank.config = config_;
  rank.send = [this](proto::Envelope e) {
    if (link_) link_->send(std::move(e));
  };
  rank.log = options_.log;
  live_ =
      start_live_fetchers(options_.live_paths ? *options_.live_paths : *default_live_paths(), rank);
  for (const auto& path : live_) link->transports.push_back(path->name());
}

bool Subscriber::note_live_message(const proto::Envelope& m) {
  for (const auto& path : live_) {
    if (path->on_control_message(m)) return true;
  }
  if (m.has_offer()) {
    const uint64_t version = m.offer().version();
    for (const auto& [name, descriptor] : m.offer().live_descriptors()) {
      const std::string& wanted = name;  // a structured binding cannot be captured (C++20)
      auto path = std::find_if(live_.begin(), live_.end(),
                               [&](const auto& p) { return p->name() == wanted; });
      if (path == live_.end()) continue;  // a path this rank does not run
      (*path)->on_offer(version, descriptor);
      std::lock_guard<std::mutex> lock(mu_);
      live_descriptors_[version][name] = descriptor;
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& shard : m.offer().shard_descriptors()) {
      for (const auto& [name, descriptor] : shard.live_descriptors()) {
        live_shards_[version][name].emplace_back(shard.shard(), descriptor);
      }
    }
    while (live_descriptors_.size() > kKeptVersions) {
      live_descriptors_.erase(live_descriptors_.begin());
    }
    while (live_shards_.size() > kKeptVersions) live_shards_.erase(live_shards_.begin());
  }
  if (m.has_recover()) {  // after a failure or a timeout: the journal up to its target
    forget_live_through(m.recover().target_version());
  }
  if (m.has_welcome()) {
    std::lock_guard<std::mutex> lock(mu_);
    live_order_.assign(m.welcome().transports().begin(), m.welcome().transports().end());
  }
  return false;
}

std::vector<std::pair<LivePathFetcher*, std::string>> Subscriber::live_carriers(uint64_t version) {
  std::vector<std::pair<LivePathFetcher*, std::string>> carriers;
  std::lock_guard<std::mutex> lock(mu_);
  auto offered = live_descriptors_.find(version);
  if (offered == live_descriptors_.end()) return carriers;
  for (const std::string& name : live_order_) {
    auto descriptor = offered->second.find(name);
    if (descriptor == offered->second.end()) continue;
    for (const auto& path : live_) {
      if (path->name() == name) carriers.emplace_back(path.get(), descriptor->second);
    }
  }
  return carriers;
}

std::vector<std::pair<LivePathFetcher*, Subscriber::ShardList>> Subscriber::live_rank_carriers(
    uint64_t version) {
  std::vector<std::pair<LivePathFetcher*, ShardList>> carriers;
  std::lock_guard<std::mutex> lock(mu_);
  auto offered = live_shards_.find(version);
  if (offered == live_shards_.end()) return carriers;
  for (const std::string& name : live_order_) {
    auto shards = offered->second.find(name);
    if (shards == offered->second.end()) continue;
    for (const auto& path : live_) {
      if (path->name() == name) carriers.emplace_back(path.get(), shards->second);
    }
  }
  return carriers;
}

std::optional<Status> Subscriber::apply_rank_parts(uint64_t version,
                                                   std::chrono::steady_clock::time_point deadline,
                                                   uint64_t* bytes_read, std::string* how) {
  for (auto& [path, shards] : live_rank_carriers(version)) {
    const std::string what = path->name() + " version " + std::to_string(version);
    auto parts = path->open_rank_parts(version, shards, deadline);
    if (!parts.ok()) {
      if (options_.log) {
        options_.log("subscriber: " + what + " from the publisher ranks: " +
                     parts.status().message() + "; reading the journal");
      }
      continue;
    }
    // A record a rank fails to serve is read from the journal, where the version is durable.
    std::string failed;
    const auto live = [&](const std::string& file, uint64_t offset,
                          uint64_t bytes) -> Result<std::optional<std::vector<uint8_t>>> {
      if (!failed.empty()) return std::optional<std::vector<uint8_t>>();
      auto got = (*parts)->read(file, offset, bytes);
      if (got.ok()) return got;
      failed = got.status().message();
      return std::optional<std::vector<uint8_t>>();
    };
    const uint64_t journal_before = reader_->delta_bytes_read();
    Status s = reader_->apply_delta_step_live(version, live);
    if (!failed.empty() && options_.log) {
      options_.log("subscriber: " + what + ": " + failed + "; the rest read from the journal");
    }
    if (!s.ok()) return Status(s.code(), "over " + path->name() + ": " + s.message());
    const uint64_t journal = reader_->delta_bytes_read() - journal_before;
    *bytes_read += (*parts)->bytes_read() + journal;
    *how = journal == 0 ? path->name() : path->name() + "+fs";
    return ok_status();
  }
  return std::nullopt;
}

std::optional<Status> Subscriber::apply_over_live_paths(uint64_t target, uint64_t* bytes_read,
                                                        std::string* how) {
  const std::optional<uint64_t> held = reader_->held();
  if (live_.empty() || !held || *held >= target) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(config_.timeouts().ack_timeout_ms());
  for (uint64_t v = *held + 1; v <= target; ++v) {
    if (auto ranked = apply_rank_parts(v, deadline, bytes_read, how)) {
      if (!ranked->ok()) {
        forget_live_through(target);
        return ranked;
      }
      continue;
    }
    bool applied = false;
    for (auto& [path, descriptor] : live_carriers(v)) {
      auto fetched = path->fetch(v, descriptor, deadline);
      if (fetched.ok() && !fetched->has_value()) continue;  // not carried after all
      Status s = fetched.ok()
                     ? reader_->apply_delta_from((*fetched)->manifest, std::move((*fetched)->parts),
                                                 path->name() + " version " + std::to_string(v))
                     : fetched.status();
      if (!s.ok()) {
        forget_live_through(target);  // the recovery that follows reads the journal
        return Status(s.code(), "over " + path->name() + ": " + s.message());
      }
      *bytes_read += (*fetched)->bytes_read;
      *how = path->name();
      applied = true;
      break;
    }
    if (applied) continue;
    if (v == *held + 1) return std::nullopt;  // no live path carries the next version
    // No live path carries the rest: the journal from here.
    auto rest = reader_->catch_up(target);
    return rest.ok() ? ok_status() : rest.status();
  }
  return ok_status();
}

void Subscriber::forget_live_through(uint64_t version) {
  for (const auto& path : live_) path->forget_through(version);
  std::lock_guard<std::mutex> lock(mu_);
  live_descriptors_.erase(live_descriptors_.begin(), live_descriptors_.upper_bound(version));
  live_shards_.erase(live_shards_.begin(), live_shards_.upper_bound(version));
}

void Subscriber::stop_live_paths() {
  for (const auto& path : live_) path->shutdown();
}

}  // namespace weightcast
