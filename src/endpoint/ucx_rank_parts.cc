#include "src/endpoint/ucx_rank_parts.h"

#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_UCX
#include "transport/ucx/rendezvous_store.h"
#include "transport/ucx/ucx_transport.h"
#endif

namespace weightcast {

// Bounds what one Offer may make a subscriber connect to.
inline constexpr size_t kMaxServingRanks = 4096;

#if WEIGHTCAST_HAVE_UCX

struct UcxRankReaders::Reader {
  std::shared_ptr<InMemoryStore> store;
  std::unique_ptr<UcxSubscriberTransport> transport;
};

namespace {

bool breaks_connection(const Status& s) {
  return s.code() == StatusCode::kIoError || s.code() == StatusCode::kInternal ||
         s.code() == StatusCode::kUnavailable;
}

class UcxRankParts final : public LiveRankParts {
 public:
  UcxRankParts(uint64_t version, std::chrono::steady_clock::time_point deadline)
      : version_(version), deadline_(deadline) {}
  ~UcxRankParts() override {
    for (auto* r : readers_) (void)r->store->erase(ucx_version_key(version_));
  }

  Status add(uint32_t shard, UcxRankReaders::Reader* reader) {
    readers_.push_back(reader);
    ASSIGN_OR_RETURN(VersionDescriptor d, reader->transport->describe(version_, deadline_));
    for (const PartDescriptor& p : d.parts) {
      if (p.name == kLiveManifestPart) continue;  // the rank's fragment: the journal's is read
      auto [it, fresh] = parts_.emplace(p.name, Served{shard, reader, p});
      if (!fresh) {
        return data_loss("ucx version " + std::to_string(version_) + ": part '" + p.name +
                         "' is served by publisher ranks " + std::to_string(it->second.shard) +
                         " and " + std::to_string(shard));
      }
    }
    return ok_status();
  }

  Result<std::optional<std::vector<uint8_t>>> read(const std::string& file, uint64_t offset,
                                                   uint64_t bytes) override {
    auto it = parts_.find(file);
    if (it == parts_.end()) return std::optional<std::vector<uint8_t>>();
    Served& s = it->second;
    const std::string what = "ucx version " + std::to_string(version_) + " from publisher rank " +
                             std::to_string(s.shard);
    if (!s.reader->transport) return unavailable(what + ": its connection failed earlier");
    std::vector<uint8_t> out(bytes);
    Status got = s.reader->transport->fetch_range(version_, s.part, offset, out, deadline_);
    if (!got.ok()) {
      if (breaks_connection(got)) s.reader->transport.reset();  // a new one next version
      return got.with_context(what);
    }
    bytes_read_ += bytes;
    return std::optional<std::vector<uint8_t>>(std::move(out));
  }

  uint64_t bytes_read() const override { return bytes_read_; }

 private:
  struct Served {
    uint32_t shard = 0;
    UcxRankReaders::Reader* reader = nullptr;
    PartDescriptor part;
  };
  uint64_t version_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<UcxRankReaders::Reader*> readers_;
  std::map<std::string, Served, std::less<>> parts_;  // by the step's part file name
  uint64_t bytes_read_ = 0;
};

}  // namespace

Result<std::unique_ptr<LiveRankParts>> UcxRankReaders::open(
    uint64_t version, const std::vector<std::pair<uint32_t, std::string>>& shards,
    std::chrono::steady_clock::time_point deadline) {
  const std::string what = "ucx version " + std::to_string(version);
  if (shards.size() > kMaxServingRanks) {
    return invalid_argument(what + ": " + std::to_string(shards.size()) +
                            " publisher ranks serve it, more than " +
                            std::to_string(kMaxServingRanks));
  }
  auto parts = std::make_unique<UcxRankParts>(version, deadline);
  for (const auto& [shard, descriptor] : shards) {
    std::unique_ptr<Reader>& reader = readers_[shard];
    if (!reader || !reader->transport) {
      reader = std::make_unique<Reader>();
      reader->store = std::make_shared<InMemoryStore>();
      UcxSubscriberOptions options;
      options.store = reader->store;
      options.tls = tls_;
      auto transport = UcxSubscriberTransport::create(std::move(options));
      if (!transport.ok()) {
        return failed_precondition(what + ": publisher rank " + std::to_string(shard) + ": " +
                                   transport.status().message());
      }
      reader->transport = std::move(*transport);
    }
    RETURN_IF_ERROR(
        reader->store->put(ucx_version_key(version), {descriptor.begin(), descriptor.end()}));
    Status added = parts->add(shard, reader.get());
    if (!added.ok()) {
      if (breaks_connection(added)) reader->transport.reset();
      return added.with_context(what + " from publisher rank " + std::to_string(shard));
    }
  }
  return std::unique_ptr<LiveRankParts>(std::move(parts));
}

size_t UcxRankReaders::connected_ranks() const {
  size_t n = 0;
  for (const auto& [shard, reader] : readers_) n += reader && reader->transport ? 1 : 0;
  return n;
}

#else  // no UCX in this build: the path is not viable, so no fetcher makes one of these

struct UcxRankReaders::Reader {};

Result<std::unique_ptr<LiveRankParts>> UcxRankReaders::open(
    uint64_t, const std::vector<std::pair<uint32_t, std::string>>&,
    std::chrono::steady_clock::time_point) {
  return Status(StatusCode::kUnimplemented, "this build has no UCX");
}

size_t UcxRankReaders::connected_ranks() const {
  return 0;
}

#endif  // WEIGHTCAST_HAVE_UCX

UcxRankReaders::UcxRankReaders(std::string tls) : tls_(std::move(tls)) {}
UcxRankReaders::~UcxRankReaders() = default;

}  // namespace weightcast
