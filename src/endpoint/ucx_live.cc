#include "src/endpoint/ucx_live.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "src/control/group_config.h"
#include "src/endpoint/ucx_rank_parts.h"
#include "transport/fs/journal_files.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_UCX
#include "transport/ucx/rendezvous_store.h"
#include "transport/ucx/ucx_transport.h"
#endif

namespace weightcast {
namespace {

constexpr const char* kName = "ucx";
constexpr const char* kNotBuilt = "this build has no UCX (libucx-dev was not found)";

#if WEIGHTCAST_HAVE_UCX

std::string describe_info(const TransportInfo& info, const std::string& tls,
                          const std::string& extra) {
  return std::string(kName) + " (UCX_TLS " + (tls.empty() ? std::string("chosen by UCX") : tls) +
         "; memory kinds: " + memory_kinds_text(info.memory_kinds) +
         (info.notes.empty() ? std::string() : "; " + info.notes) + extra + ")";
}

class UcxLiveServer final : public LivePathServer {
 public:
  static Result<std::unique_ptr<LivePathServer>> create(const std::string& tls,
                                                        const std::string& publisher_memory,
                                                        size_t keep_versions) {
    std::unique_ptr<UcxLiveServer> s(new UcxLiveServer());
    s->store_ = std::make_shared<InMemoryStore>();
    s->keep_versions_ = std::max<size_t>(1, keep_versions);
    s->tls_ = tls;
    s->copies_ = ucx_live_serves_copies(publisher_memory);
    UcxPublisherOptions options;
    options.store = s->store_;
    options.tls = tls;
    options.keep_versions = s->keep_versions_;
    options.memory = s->copies_ ? UcxPublisherOptions::Memory::kCopyToSharedMemory
                                : UcxPublisherOptions::Memory::kInPlace;
    auto transport = UcxPublisherTransport::create(std::move(options));
    if (!transport.ok()) {
      return failed_precondition(std::string(kName) + ": " + transport.status().message());
    }
    s->transport_ = std::move(*transport);
    return std::unique_ptr<LivePathServer>(std::move(s));
  }

  ~UcxLiveServer() override {
    // The transport unmaps every served buffer before the bytes it maps are freed.
    transport_.reset();
  }

  std::string name() const override { return kName; }
  std::string describe() const override {
    return describe_info(transport_->info(), tls_,
                         copies_ ? "; serving copies in shared memory" : "; serving in place");
  }
  std::vector<MemoryKind> memory_kinds() const override { return transport_->info().memory_kinds; }
  void shutdown() override { transport_->close_worker(); }

  Result<std::string> serve(uint64_t version, std::shared_ptr<const DeltaInMemory> delta) override {
    const std::string what = std::string(kName) + " serve of version " + std::to_string(version);
    if (!delta) return invalid_argument(what + ": no delta");
    if (delta->parts.size() != static_cast<size_t>(delta->manifest.parts_size())) {
      return invalid_argument(what + ": " + std::to_string(delta->parts.size()) +
                              " parts for a manifest of " +
                              std::to_string(delta->manifest.parts_size()));
    }
    Served served;
    served.manifest = frame_journal_message(JournalFileKind::kManifest, delta->manifest);
    std::vector<PartPayload> payload;
    payload.push_back({kLiveManifestPart, served.manifest});
    for (size_t i = 0; i < delta->parts.size(); ++i) {
      payload.push_back({delta->manifest.parts(static_cast<int>(i)).file(), delta->parts[i]});
    }
    RETURN_IF_ERROR(transport_->publish(version, payload, deadline_in(std::chrono::seconds(30))));
    // In place, the transport retired its oldest version when this one made keep_versions + 1;
    // only now may that version's bytes be freed (the manifest vector moved below keeps its
    // buffer). Copies need nothing kept.
    if (!copies_) {
      served.delta = std::move(delta);
      served_.push_back(std::move(served));
    }
    while (served_.size() > keep_versions_) served_.pop_front();
    auto blob = store_->get(ucx_version_key(version));
    if (!blob.ok()) return blob.status();
    if (!*blob) return internal_error(what + ": the transport left no blob");
    return std::string((*blob)->begin(), (*blob)->end());
  }

 private:
  UcxLiveServer() = default;
  struct Served {
    std::vector<uint8_t> manifest;
    std::shared_ptr<const DeltaInMemory> delta;
  };
  std::shared_ptr<InMemoryStore> store_;
  std::unique_ptr<UcxPublisherTransport> transport_;
  std::deque<Served> served_;
  size_t keep_versions_ = 2;
  std::string tls_;
  bool copies_ = false;
};

class UcxLiveFetcher final : public LivePathFetcher {
 public:
  static Result<std::unique_ptr<LivePathFetcher>> create(const std::string& tls) {
    std::unique_ptr<UcxLiveFetcher> f(new UcxLiveFetcher(tls));
    RETURN_IF_ERROR(f->ensure_transport());
    return std::unique_ptr<LivePathFetcher>(std::move(f));
  }

  std::string name() const override { return kName; }
  Result<std::unique_ptr<LiveRankParts>> open_rank_parts(
      uint64_t version, const std::vector<std::pair<uint32_t, std::string>>& shards,
      std::chrono::steady_clock::time_point deadline) override {
    return rank_readers_.open(version, shards, deadline);
  }
  std::string describe() const override {
    return transport_ ? describe_info(transport_->info(), tls_, "")
                      : std::string(kName) + " (not connected)";
  }
  std::vector<MemoryKind> memory_kinds() const override {
    return transport_ ? transport_->info().memory_kinds : std::vector<MemoryKind>{};
  }

  // Reads the manifest first (checked as a journal manifest is), then every part it lists
  // (size and XXH3 verified by the transport).
  Result<std::optional<FetchedDelta>> fetch(
      uint64_t version, const std::string& descriptor,
      std::chrono::steady_clock::time_point deadline) override {
    RETURN_IF_ERROR(ensure_transport());
    const std::string what = std::string(kName) + " version " + std::to_string(version);
    RETURN_IF_ERROR(store_->put(ucx_version_key(version), {descriptor.begin(), descriptor.end()}));
    auto result = [&]() -> Result<FetchedDelta> {
      ASSIGN_OR_RETURN(VersionDescriptor d, transport_->describe(version, deadline));
      if (d.parts.empty() || d.parts[0].name != kLiveManifestPart) {
        return data_loss(what + ": the blob's first part is not its " + kLiveManifestPart);
      }
      FetchedDelta out;
      std::vector<uint8_t> manifest(d.parts[0].bytes);
      RETURN_IF_ERROR(transport_->fetch(version, d.parts[0], manifest, deadline));
      ASSIGN_OR_RETURN(out.manifest, parse_manifest(manifest, what + " " + kLiveManifestPart));
      out.bytes_read = manifest.size();
      std::vector<std::string> served;
      for (const auto& p : d.parts) served.push_back(p.name);
      RETURN_IF_ERROR(check_live_delta_parts(what, version, out.manifest, served));
      for (size_t i = 1; i < d.parts.size(); ++i) {
        std::vector<uint8_t> bytes(d.parts[i].bytes);
        RETURN_IF_ERROR(transport_->fetch(version, d.parts[i], bytes, deadline));
        out.bytes_read += bytes.size();
        out.parts.push_back(std::move(bytes));
      }
      return out;
    }();
    (void)store_->erase(ucx_version_key(version));
    if (!result.ok() && (result.status().code() == StatusCode::kIoError ||
                         result.status().code() == StatusCode::kInternal ||
                         result.status().code() == StatusCode::kUnavailable)) {
      transport_.reset();  // the connection is broken: a new one for the next version
    }
    if (!result.ok()) return result.status();
    return std::optional<FetchedDelta>(std::move(result).value());
  }

 private:
  explicit UcxLiveFetcher(std::string tls) : tls_(tls), rank_readers_(std::move(tls)) {}
  Status ensure_transport() {
    if (transport_) return ok_status();
    store_ = std::make_shared<InMemoryStore>();
    UcxSubscriberOptions options;
    options.store = store_;
    options.tls = tls_;
    auto transport = UcxSubscriberTransport::create(std::move(options));
    if (!transport.ok()) {
      return failed_precondition(std::string(kName) + ": " + transport.status().message());
    }
    transport_ = std::move(*transport);
    return ok_status();
  }

  std::string tls_;
  std::shared_ptr<InMemoryStore> store_;
  std::unique_ptr<PartReader> transport_;  // made by UcxSubscriberTransport::create
  UcxRankReaders rank_readers_;            // versions several publisher ranks serve
};

#endif  // WEIGHTCAST_HAVE_UCX

class UcxLivePath final : public LivePath {
 public:
  std::string name() const override { return kName; }
  bool carries_rank_parts() const override { return true; }
  Status viable(const proto::GroupConfig&) const override {
    if (!ucx_built())
      return Status(StatusCode::kUnimplemented, std::string(kName) + ": " + kNotBuilt);
    return ok_status();
  }
  Result<std::unique_ptr<LivePathServer>> make_server(const LivePathRank& rank) const override {
    RETURN_IF_ERROR(viable(rank.config));
#if WEIGHTCAST_HAVE_UCX
    // Readable: the versions a subscriber may still be fetching while newer ones arrive.
    return UcxLiveServer::create(rank.config.ucx().tls(), rank.config.ucx().publisher_memory(),
                                 rank.config.max_in_flight() + 2);
#else
    return internal_error("unreachable");
#endif
  }
  Result<std::unique_ptr<LivePathFetcher>> make_fetcher(const LivePathRank& rank) const override {
    RETURN_IF_ERROR(viable(rank.config));
#if WEIGHTCAST_HAVE_UCX
    return UcxLiveFetcher::create(rank.config.ucx().tls());
#else
    return internal_error("unreachable");
#endif
  }
};

}  // namespace

bool ucx_built() {
  return WEIGHTCAST_HAVE_UCX != 0;
}

std::shared_ptr<const LivePath> ucx_live_path() {
  return std::make_shared<UcxLivePath>();
}

}  // namespace weightcast
