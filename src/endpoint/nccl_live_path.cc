#include "src/endpoint/nccl_live_path.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "src/control/nccl_epochs.h"
#include "src/endpoint/nccl_live.h"

namespace weightcast {
namespace {

NcclLiveOptions live_options(const LivePathRank& rank) {
  NcclLiveOptions o;
  o.rank = rank.rank;
  o.timeout = nccl_timeout(rank.config.nccl());
  o.send = rank.send;
  o.log = rank.log;
  return o;
}

// What both sides share: the rank's NcclLive, which owns the epoch protocol.
template <typename Base>
class NcclSide : public Base {
 public:
  NcclSide(std::unique_ptr<nccl::BroadcastGroupFactory> groups, NcclLiveOptions options,
           std::vector<MemoryKind> kinds)
      : live_(std::move(groups), options), kinds_(std::move(kinds)), timeout_(options.timeout) {}

  std::string name() const override { return std::string(kNcclPath); }
  std::string describe() const override {
    std::string d = live_.describe();
    d.insert(d.size() - 1, "; memory kinds: " + memory_kinds_text(kinds_));
    return d;
  }
  std::vector<MemoryKind> memory_kinds() const override { return kinds_; }
  bool on_control_message(const proto::Envelope& m) override {
    if (!m.has_nccl_epoch()) return false;
    live_.on_epoch(m.nccl_epoch());
    return true;
  }
  void shutdown() override { live_.shutdown(); }

 protected:
  NcclLive live_;
  std::vector<MemoryKind> kinds_;
  std::chrono::milliseconds timeout_;
};

class NcclLiveServer final : public NcclSide<LivePathServer> {
 public:
  using NcclSide::NcclSide;

  Result<std::string> serve(uint64_t version, std::shared_ptr<const DeltaInMemory> delta) override {
    const uint64_t epoch = live_.ready_epoch();
    if (epoch == 0) return std::string();  // no epoch ready: the other paths carry it
    live_.send_version(epoch, version, std::move(delta));
    return nccl_descriptor(epoch);
  }
};

class NcclLiveFetcher final : public NcclSide<LivePathFetcher> {
 public:
  NcclLiveFetcher(std::unique_ptr<nccl::BroadcastGroupFactory> groups, NcclLiveOptions options,
                  std::vector<MemoryKind> kinds)
      : NcclSide(std::move(groups), options, std::move(kinds)), log_(options.log) {}

  void on_offer(uint64_t version, const std::string& descriptor) override {
    const std::optional<uint64_t> epoch = nccl_descriptor_epoch(descriptor);
    if (!epoch) {
      // Not entering the round fails it for every member; the journal then carries it.
      if (log_) {
        log_("nccl: the offer of version " + std::to_string(version) +
             " names no epoch (a descriptor of " + std::to_string(descriptor.size()) +
             " bytes that is not an NcclDescriptor)");
      }
      return;
    }
    live_.receive_version(*epoch, version);
  }

  Result<std::optional<FetchedDelta>> fetch(
      uint64_t version, const std::string& descriptor,
      std::chrono::steady_clock::time_point deadline) override {
    (void)descriptor;  // the round was entered by on_offer
    // A round has the NCCL deadline; its outcome is waited for a little longer.
    deadline =
        std::min(deadline, std::chrono::steady_clock::now() + timeout_ + std::chrono::seconds(1));
    auto received = live_.take_received(version, deadline);
    if (!received) return std::optional<FetchedDelta>();  // no round carried it
    if (!received->ok()) return received->status();
    return std::optional<FetchedDelta>(std::move(*received).value());
  }

  void forget_through(uint64_t version) override { live_.forget_through(version); }

 private:
  std::function<void(const std::string&)> log_;
};

class NcclLivePath final : public LivePath {
 public:
  NcclLivePath(NcclGroupsMaker groups, std::vector<MemoryKind> kinds)
      : groups_(std::move(groups)), kinds_(std::move(kinds)) {}

  std::string name() const override { return std::string(kNcclPath); }
  Status viable(const proto::GroupConfig& config) const override {
    auto groups = make_groups(config);
    return groups.ok() ? ok_status() : groups.status();
  }
  Result<std::unique_ptr<LivePathServer>> make_server(const LivePathRank& rank) const override {
    ASSIGN_OR_RETURN(auto groups, make_groups(rank.config));
    return std::unique_ptr<LivePathServer>(
        std::make_unique<NcclLiveServer>(std::move(groups), live_options(rank), kinds_));
  }
  Result<std::unique_ptr<LivePathFetcher>> make_fetcher(const LivePathRank& rank) const override {
    ASSIGN_OR_RETURN(auto groups, make_groups(rank.config));
    return std::unique_ptr<LivePathFetcher>(
        std::make_unique<NcclLiveFetcher>(std::move(groups), live_options(rank), kinds_));
  }

 private:
  Result<std::unique_ptr<nccl::BroadcastGroupFactory>> make_groups(
      const proto::GroupConfig& config) const {
    return groups_ ? groups_(config.nccl()) : make_nccl_groups(config.nccl());
  }
  NcclGroupsMaker groups_;
  std::vector<MemoryKind> kinds_;
};

}  // namespace

std::shared_ptr<const LivePath> nccl_live_path(NcclGroupsMaker groups,
                                               std::vector<MemoryKind> memory_kinds) {
  return std::make_shared<NcclLivePath>(std::move(groups), std::move(memory_kinds));
}

}  // namespace weightcast
