// Two publisher ranks (src/endpoint/shard_publisher.h) in one process, each publishing its
// shard of the Weights model (a tensor-parallel block of packed.left, flat ranges of
// packed.right and vec), to the two engine ranks of a tp2 replica and an engine holding every
// tensor whole, over the ucx live path with UCX's shared-memory and TCP transports in turn
// and each rank serving in place and from shared-memory copies: each rank serves its own parts
// from its memory, and every engine rank reads the records it needs straight from the ranks
// that own them (never from the journal), bit-exact after every version; an engine rank of the
// replica reads less than the whole engine. A rank that serves nothing live, or whose worker is
// gone once its part is durable, leaves its records to the journal, and the engines still hold
// every version exactly.
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "src/endpoint/shard_publisher.h"
#include "src/endpoint/ucx_live.h"
#include "tests/group/slice_engine.h"
#include "tests/group/trainer_side.h"

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

// Shard k of 2 of the Weights model, in memory of its own (a trainer rank's shard): columns
// [16k, 16k + 16) of packed.left (a box, row-major), elements [64k, 64k + 64) of packed.right
// and vec [600k, 600 + 400k).
struct ShardMemory {
  explicit ShardMemory(uint32_t k) : shard(k), vec(k == 0 ? 600 : 400) {}
  uint32_t shard;
  std::vector<uint16_t> left = std::vector<uint16_t>(4 * 16);
  std::vector<uint16_t> right = std::vector<uint16_t>(64);
  std::vector<uint16_t> vec;
  uint64_t vec_first() const { return shard == 0 ? 0 : 600; }

  void set(uint64_t v) {
    Weights w;
    w.set(v);
    for (size_t r = 0; r < 4; ++r) {
      for (size_t c = 0; c < 16; ++c) left[r * 16 + c] = w.packed[r * 64 + 16 * shard + c];
    }
    for (size_t j = 0; j < 64; ++j) {
      const size_t i = 64 * shard + j;  // flat index in packed.right [4, 32]
      right[j] = w.packed[(i / 32) * 64 + 32 + i % 32];
    }
    for (size_t j = 0; j < vec.size(); ++j) vec[j] = w.vec[vec_first() + j];
  }
  std::vector<OwnedRange> ranges() const {
    const auto bytes = [](const std::vector<uint16_t>& v) {
      return reinterpret_cast<const uint8_t*>(v.data());
    };
    return {{"packed.left", 0, 64, bytes(left), TensorSlice::box({0, 16 * shard}, {4, 16})},
            {"packed.right", 64 * shard, 64, bytes(right)},
            {"vec", vec_first(), vec.size(), bytes(vec)}};
  }
};

std::vector<SafetensorsTensorSpec> model() {
  return {{"packed.left", DType::kBF16, {4, 32}},
          {"packed.right", DType::kBF16, {4, 32}},
          {"vec", DType::kBF16, {1000}}};
}

// (UCX_TLS, ucx.publisher_memory)
class ShardUcx : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  void SetUp() override {
    if (!ucx_built()) GTEST_SKIP() << "this build has no UCX (libucx-dev not found)";
  }
  GroupSpec spec() const {
    GroupSpec s;
    s.publishers = 2;  // ranks 1 (the lead) and 2
    s.subscribers = 3;
    s.transports = "[ucx, fs]";
    s.ucx_tls = std::get<0>(GetParam());
    s.ucx_publisher_memory = std::get<1>(GetParam());
    s.anchor_every = 100;
    s.extra_yaml = kLayouts;
    s.subscriber_fields = {"layout: tp2, part: 0, replica: e0",
                           "layout: tp2, part: 1, replica: e0"};
    return s;
  }
};

// The two shard ranks, started; `no_live` (a shard) serves nothing live, shard 1 serves on
// `shard1_paths` when given.
struct Shards {
  Shards(const TestGroup& g, std::optional<uint32_t> no_live = std::nullopt,
         std::shared_ptr<const LivePathRegistry> shard1_paths = nullptr) {
    for (uint32_t k = 0; k < 2; ++k) {
      ShardPublisherOptions o;
      o.rank = 1 + k;
      o.threads = 1;
      if (k == 1) o.live_paths = shard1_paths;
      if (no_live == k) o.live_paths = std::make_shared<LivePathRegistry>();
      auto p = ShardPublisher::start(g.config(), o, model(), memory[k].ranges());
      if (!p.ok()) {
        error = p.status().to_string();
        return;
      }
      ranks.push_back(std::move(p).value());
    }
  }
  // Every shard publishes version v of the model at once (the lead waits for the other's part).
  Status publish(uint64_t v) {
    for (auto& m : memory) m.set(v);
    auto other = std::async(std::launch::async, [&] { return ranks[1]->publish(v); });
    auto lead = ranks[0]->publish(v);
    auto second = other.get();
    if (!lead.ok()) return lead.status();
    if (!second.ok()) return second.status();
    return ranks[0]->wait_committed(v, in(seconds(30)));
  }
  ShardMemory memory[2] = {ShardMemory(0), ShardMemory(1)};
  std::vector<std::unique_ptr<ShardPublisher>> ranks;
  std::string error;
};

// An engine holding every tensor whole, each contiguous (range records of several publisher
// ranks apply to contiguous destinations: catch_up_reader.h).
struct WholeEngine {
  std::vector<uint16_t> left = std::vector<uint16_t>(128);
  std::vector<uint16_t> right = std::vector<uint16_t>(128);
  std::vector<uint16_t> vec = std::vector<uint16_t>(1000);
  Status register_with(Subscriber& s) {
    TensorRef l = TensorRef::contiguous("packed.left", DType::kBF16, left.data(), 128);
    l.shape = {4, 32};
    RETURN_IF_ERROR(s.register_tensor(l));
    TensorRef r = TensorRef::contiguous("packed.right", DType::kBF16, right.data(), 128);
    r.shape = {4, 32};
    RETURN_IF_ERROR(s.register_tensor(r));
    return s.register_tensor(TensorRef::contiguous("vec", DType::kBF16, vec.data(), 1000));
  }
  bool holds(uint64_t v) const {
    Weights w;
    w.set(v);
    for (size_t i = 0; i < 128; ++i) {
      const size_t row = i / 32, col = i % 32;
      if (left[i] != w.packed[row * 64 + col] || right[i] != w.packed[row * 64 + 32 + col]) {
        return false;
      }
    }
    return vec == w.vec;
  }
};

// The engines of the test: the tp2 replica (ranks 3, 4) and a whole engine (rank 5).
struct Engines {
  explicit Engines(const TestGroup& g) {
    part[0] = connect_slices(g, 3, slices[0]);
    part[1] = connect_slices(g, 4, slices[1]);
    auto s = Subscriber::create(g.config(), one_thread<SubscriberOptions>(5));
    if (s.ok() && whole.register_with(**s).ok() && (*s)->connect().ok()) full = std::move(*s);
  }
  bool ok() const { return part[0] && part[1] && full; }
  ::testing::AssertionResult at(uint64_t v) {
    for (int k = 0; k < 2; ++k) {
      const Status reached = part[k]->wait_for_version(v, in(seconds(30)));
      if (!reached.ok()) return ::testing::AssertionFailure() << reached.to_string();
      if (!slices[k].holds(v)) return ::testing::AssertionFailure() << "part " << k << " at v" << v;
    }
    const Status reached = full->wait_for_version(v, in(seconds(30)));
    if (!reached.ok()) return ::testing::AssertionFailure() << reached.to_string();
    if (!whole.holds(v)) return ::testing::AssertionFailure() << "the whole engine at v" << v;
    return ::testing::AssertionSuccess();
  }
  SliceEngine slices[2] = {SliceEngine{0}, SliceEngine{1}};
  WholeEngine whole;
  std::unique_ptr<Subscriber> part[2];
  std::unique_ptr<Subscriber> full;
};

// Bytes rank `rank` read for `version` (its ack), 0 when it did not ack it.
uint64_t acked_bytes(const proto::StatusReply& status, uint64_t version, uint32_t rank) {
  for (const auto& v : status.versions()) {
    if (v.version() != version) continue;
    for (const auto& r : v.results()) {
      if (r.rank() == rank && r.result() == "ok") return r.bytes_read();
    }
  }
  return 0;
}

// The engines follow versions 0..last that `shards` publish, each held exactly by every
// engine after it commits; `status`: the group's status after, every result ok.
void publish_and_follow(const TestGroup& g, Shards& shards, uint64_t last,
                        std::optional<proto::StatusReply>* status) {
  ASSERT_TRUE(shards.error.empty()) << shards.error;
  Engines engines(g);
  ASSERT_TRUE(engines.ok());
  for (uint64_t v = 0; v <= last; ++v) {
    const Status published = shards.publish(v);
    ASSERT_TRUE(published.ok()) << "v" << v << ": " << published.to_string();
    EXPECT_TRUE(engines.at(v)) << "v" << v;
  }
  *status = group_status(g.config());
  ASSERT_TRUE(status->has_value());
  EXPECT_EQ(bad_results(**status), "");
}

TEST_P(ShardUcx, EngineRanksReadTheirRecordsStraightFromThePublisherRanksThatOwnThem) {
  TestGroup g(spec());
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  Shards shards(g);
  std::optional<proto::StatusReply> status;
  publish_and_follow(g, shards, 4, &status);
  if (HasFatalFailure()) return;
  for (uint32_t rank : {3u, 4u, 5u}) {
    EXPECT_EQ(acked_transport(*status, 0, rank), "fs") << "the first anchor is the journal's";
    for (uint64_t v = 1; v <= 4; ++v) {
      EXPECT_EQ(acked_transport(*status, v, rank), "ucx") << "rank " << rank << " v" << v;
      EXPECT_GT(acked_bytes(*status, v, rank), 0u) << "rank " << rank << " v" << v;
    }
  }
  // Part 0 needs packed.left's record of shard 0 only and the vec records of its half: less
  // than the engine that needs every record.
  for (uint64_t v = 1; v <= 4; ++v) {
    EXPECT_LT(acked_bytes(*status, v, 3), acked_bytes(*status, v, 5)) << "v" << v;
  }
}

TEST_P(ShardUcx, ARankThatServesNothingLiveLeavesItsRecordsToTheJournal) {
  TestGroup g(spec());
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  Shards shards(g, /*no_live=*/1);
  std::optional<proto::StatusReply> status;
  publish_and_follow(g, shards, 2, &status);
  if (HasFatalFailure()) return;
  // Every engine needs records of both shards (part 0: shard 1's packed.right half).
  for (uint32_t rank : {3u, 4u, 5u}) {
    EXPECT_EQ(acked_transport(*status, 2, rank), "ucx+fs") << "rank " << rank;
  }
}

// The ucx path, whose servers close their worker right after serving a version: the
// descriptor names a worker that is gone (a rank that died after its part was durable).
class ClosingUcx final : public LivePath {
 public:
  std::string name() const override { return inner_->name(); }
  bool carries_rank_parts() const override { return true; }
  Status viable(const proto::GroupConfig& c) const override { return inner_->viable(c); }
  Result<std::unique_ptr<LivePathServer>> make_server(const LivePathRank& rank) const override {
    ASSIGN_OR_RETURN(auto server, inner_->make_server(rank));
    return std::unique_ptr<LivePathServer>(new Closing(std::move(server)));
  }
  Result<std::unique_ptr<LivePathFetcher>> make_fetcher(const LivePathRank& rank) const override {
    return inner_->make_fetcher(rank);
  }

 private:
  class Closing final : public LivePathServer {
   public:
    explicit Closing(std::unique_ptr<LivePathServer> inner) : inner_(std::move(inner)) {}
    std::string name() const override { return inner_->name(); }
    std::string describe() const override { return inner_->describe(); }
    std::vector<MemoryKind> memory_kinds() const override { return inner_->memory_kinds(); }
    Result<std::string> serve(uint64_t version,
                              std::shared_ptr<const DeltaInMemory> delta) override {
      auto descriptor = inner_->serve(version, std::move(delta));
      inner_->shutdown();
      return descriptor;
    }

   private:
    std::unique_ptr<LivePathServer> inner_;
  };
  std::shared_ptr<const LivePath> inner_ = ucx_live_path();
};

TEST_P(ShardUcx, ARankWhoseWorkerIsGoneIsReadFromTheJournalAndNoEngineHoldsAWrongVersion) {
  TestGroup g(spec());
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  auto closing = std::make_shared<LivePathRegistry>();
  closing->add(10, std::make_shared<ClosingUcx>());
  Shards shards(g, std::nullopt, closing);
  std::optional<proto::StatusReply> status;
  publish_and_follow(g, shards, 2, &status);
  if (HasFatalFailure()) return;
  // v1's descriptor of shard 1 names its closed worker; v2 it could not serve at all.
  for (uint32_t rank : {3u, 4u, 5u}) {
    for (uint64_t v = 1; v <= 2; ++v) {
      EXPECT_EQ(acked_transport(*status, v, rank), "ucx+fs") << "rank " << rank << " v" << v;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tls, ShardUcx,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::Values("in_place", "copy")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param);
                         });

}  // namespace
}  // namespace weightcast::testing
