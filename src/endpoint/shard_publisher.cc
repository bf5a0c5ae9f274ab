#include "src/endpoint/shard_publisher.h"

#include <algorithm>
#include <utility>

#include "codec/base/allocation.h"
#include "codec/dtype.h"
#include "src/endpoint/group_journal.h"

namespace weightcast {
namespace {

uint64_t unix_us_now() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

Result<ShardPlace> shard_place(const proto::GroupConfig& config, uint32_t rank) {
  std::vector<uint32_t> publishers;
  for (const auto& r : config.ranks()) {
    if (r.role() == proto::ROLE_PUBLISHER) publishers.push_back(r.rank());
  }
  std::sort(publishers.begin(), publishers.end());
  const auto it = std::find(publishers.begin(), publishers.end(), rank);
  if (it == publishers.end()) {
    return invalid_argument("rank " + std::to_string(rank) +
                            " is not a publisher rank of the group config");
  }
  if (config.fp8().enabled() && publishers.size() > 1) {
    return invalid_argument("rank " + std::to_string(rank) +
                            ": an FP8 group (fp8.enabled) is published by one publisher rank; the "
                            "config lists " +
                            std::to_string(publishers.size()));
  }
  ShardPlace place;
  place.shard = static_cast<uint32_t>(it - publishers.begin());
  place.shards = static_cast<uint32_t>(publishers.size());
  return place;
}

ShardPublisher::ShardPublisher(proto::GroupConfig config, ShardPublisherOptions options,
                               ShardPlace place)
    : config_(std::move(config)), options_(std::move(options)), place_(place) {
  const auto ack = std::chrono::milliseconds(config_.timeouts().ack_timeout_ms());
  if (options_.parts_wait.count() == 0) options_.parts_wait = ack;
  if (options_.credit_timeout.count() == 0) options_.credit_timeout = 2 * ack;
  credit_ = std::make_unique<GroupCredit>(config_.max_in_flight(), config_.coordinator_endpoint(),
                                          options_.log);
}

Result<std::unique_ptr<ShardPublisher>> ShardPublisher::start(
    const proto::GroupConfig& config, ShardPublisherOptions options,
    std::vector<SafetensorsTensorSpec> model, std::vector<OwnedRange> ranges) {
  ASSIGN_OR_RETURN(const ShardPlace place, shard_place(config, options.rank));
  std::unique_ptr<ShardPublisher> p(new ShardPublisher(config, std::move(options), place));
  p->pool_ = std::make_unique<ThreadPool>(p->options_.threads);
  RankPublisherOptions o;
  o.root = config.journal_root();
  o.rank = place.shard;
  o.ranks = place.shards;
  o.anchor_every = config.anchor_every();
  o.wait = p->options_.parts_wait;
  ASSIGN_OR_RETURN(o.journal, group_journal_options(config, p->pool_.get(), p->options_.log));
  ShardPublisher* self = p.get();
  p->start_live_paths();
  if (!p->live_.empty()) {
    o.serve = [self](uint64_t version, std::shared_ptr<const DeltaInMemory> delta) {
      return self->serve(version, std::move(delta));
    };
  }
  for (const OwnedRange& r : ranges) {
    for (const auto& t : model) {
      if (t.name == r.name) p->shard_bytes_ += r.count * dtype_size(t.dtype);
    }
  }
  ASSIGN_OR_RETURN(p->publisher_,
                   RankPublisher::open(std::move(o), std::move(model), std::move(ranges)));
  if (p->lead()) {
    if (const auto& head = p->publisher_->writer()->head()) p->published_ = head->version();
  }
  RankLinkOptions link;
  link.rank = p->options_.rank;
  link.role = proto::ROLE_PUBLISHER;
  link.heartbeat = std::chrono::milliseconds(config.timeouts().heartbeat_ms());
  link.log = p->options_.log;
  for (const auto& path : p->live_) link.transports.push_back(path->name());
  ASSIGN_OR_RETURN(p->link_, RankLink::start(
                                 config, link,
                                 [self](const proto::Envelope& m) { self->credit_->on_message(m); },
                                 [self] {
                                   std::lock_guard<std::mutex> lock(self->mu_);
                                   return self->published_;
                                 }));
  return p;
}

ShardPublisher::~ShardPublisher() {
  stop();
}

Result<RankPublishReport> ShardPublisher::publish(uint64_t version, bool force_anchor) {
  const std::string who = "publisher rank " + std::to_string(options_.rank) + " (shard " +
                          std::to_string(place_.shard) + " of " + std::to_string(place_.shards) +
                          ")";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return failed_precondition(who + " is stopping");
  }
  if (lead()) {
    RETURN_IF_ERROR(credit_->wait_for_credit(version, options_.credit_timeout).with_context(who));
  }
  const auto started = std::chrono::steady_clock::now();
  const uint64_t started_unix = unix_us_now();
  auto report = publisher_->publish(version, force_anchor);
  if (!report.ok()) {
    if (options_.log) options_.log(who + ": " + report.status().message());
    return report.status().with_context(who);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_ = version;
  }
  if (lead()) offer(*report, started, started_unix);
  return report;
}

void ShardPublisher::offer(const RankPublishReport& report,
                           std::chrono::steady_clock::time_point started, uint64_t started_unix) {
  JournalWriter& writer = *publisher_->writer();
  proto::Envelope e;
  proto::Offer& offer = *e.mutable_offer();
  offer.set_version(report.version);
  offer.set_anchor(report.anchor);
  if (!report.anchor) {
    offer.set_has_base(true);
    offer.set_base_version(report.version - 1);
  }
  for (const auto& t : writer.head_manifest()->tensors()) {
    proto::TensorChecksum& c = *offer.add_checksums();
    c.set_name(t.name());
    c.set_checksum(t.checksum());
  }
  offer.set_stored_bytes(report.commit ? report.commit->stored_bytes : report.stored_bytes);
  offer.set_published_unix_us(started_unix);
  offer.set_journal_id(writer.head()->journal_id());
  if (report.commit) {
    const auto& served = report.commit->rank_live_descriptors;
    for (size_t shard = 0; shard < served.size(); ++shard) {
      if (served[shard].empty()) continue;  // read from the journal
      proto::ShardDescriptors& d = *offer.add_shard_descriptors();
      d.set_shard(static_cast<uint32_t>(shard));
      d.mutable_live_descriptors()->insert(served[shard].begin(), served[shard].end());
    }
  }
  // For the benches: the lead's own shard and its peak RSS, never the model's.
  offer.set_model_bytes(shard_bytes_);
  offer.set_peak_rss_bytes(process_peak_rss_bytes());
  offer.set_publish_us(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                 std::chrono::steady_clock::now() - started)
                                                 .count()));
  credit_->offered(report.version);
  link_->send(std::move(e));
}

void ShardPublisher::start_live_paths() {
  const auto all = options_.live_paths ? options_.live_paths : default_live_paths();
  LivePathRegistry registry;
  const auto paths = all->paths();
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i]->carries_rank_parts()) registry.add(static_cast<int>(paths.size() - i), paths[i]);
  }
  LivePathRank rank;
  rank.rank = options_.rank;
  rank.config = config_;
  rank.send = [this](proto::Envelope e) {
    if (link_) link_->send(std::move(e));
  };
  rank.log = options_.log;
  live_ = start_live_servers(registry, rank);
}

std::map<std::string, std::string> ShardPublisher::serve(
    uint64_t version, std::shared_ptr<const DeltaInMemory> delta) {
  std::map<std::string, std::string> descriptors;
  for (const auto& path : live_) {
    auto descriptor = path->serve(version, delta);
    if (!descriptor.ok()) {
      if (options_.log) {
        options_.log("publisher rank " + std::to_string(options_.rank) + ": version " +
                     std::to_string(version) + " not served over " + path->name() + ": " +
                     descriptor.status().message());
      }
    } else if (!descriptor->empty()) {
      descriptors[path->name()] = std::move(descriptor).value();
    }
  }
  return descriptors;
}

std::optional<uint64_t> ShardPublisher::committed() const {
  return credit_->committed();
}

Status ShardPublisher::wait_committed(uint64_t version,
                                      std::chrono::steady_clock::time_point deadline) const {
  return credit_->wait_committed(version, deadline, [this] { return link_->fatal_error(); });
}

void ShardPublisher::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  credit_->stop();
  if (link_) link_->stop(reason);
  for (const auto& path : live_) path->shutdown();
}

}  // namespace weightcast
