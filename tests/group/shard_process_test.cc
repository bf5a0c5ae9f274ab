// Four publisher ranks as weightcastd processes, each publishing its shard of the demo model
// (src/daemon/shard_demo.h) through one journal, to a tensor-parallel replica of two engine
// ranks (weightcastd) and a whole-tensor engine in this process that compares every version it
// holds with the model. One publisher rank is killed with SIGKILL mid-version (its part
// written, not in place: the rank_fragment.written fault point): the version is never
// committed or applied, every engine stays on the version before, and once the rank is back
// (it refuses the delta it has no snapshot for) the lead's next version is an anchor and the
// group goes on to the last version.
#include <signal.h>

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>

#include "codec/base/thread_pool.h"
#include "src/daemon/shard_demo.h"
#include "src/daemon/synthetic_model.h"
#include "src/endpoint/subscriber.h"
#include "tests/group/group_harness.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

constexpr uint64_t kParameters = 2000000;
constexpr uint64_t kSeed = 3;  // the harness's demo seed

const char kLayouts[] = R"(layouts:
  - name: tp2
    parts: 2
    rules:
      - {match: '.*\.(q|k|v|gate|up)_proj\.(weight|bias)', dim: 0}
      - {match: '.*\.(o|down)_proj\.weight', dim: 1}
      - {match: '.*(embed_tokens|lm_head)\.weight', dim: 0}
)";

// An engine holding every tensor whole, checking each version it holds against the model.
class ModelEngine {
 public:
  ModelEngine() : pool_(1) {
    expected_ = SyntheticModel::create(kParameters, 0.01, kSeed, &pool_).value();
    for (const TensorRef& r : expected_->tensor_refs()) {
      buffers_.emplace_back(r.numel() * r.element_size());
      TensorRef d = TensorRef::contiguous(r.name, r.dtype, buffers_.back().data(),
                                          static_cast<int64_t>(r.numel()));
      d.shape = r.shape;
      refs_.push_back(d);
    }
  }
  std::unique_ptr<Subscriber> connect(const TestGroup& g, uint32_t rank) {
    SubscriberOptions so;
    so.rank = rank;
    so.threads = 1;
    so.after_apply = [this](uint64_t v) { check(v); };
    auto s = Subscriber::create(g.config(), so);
    if (!s.ok()) return nullptr;
    for (const TensorRef& r : refs_) {
      if (!(*s)->register_tensor(r).ok()) return nullptr;
    }
    if (!(*s)->connect().ok()) return nullptr;
    return std::move(s).value();
  }
  std::set<uint64_t> held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  std::vector<std::string> bad() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bad_;
  }

 private:
  void check(uint64_t v) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.insert(v);
    expected_->fast_forward(v);
    const auto want = expected_->tensor_refs();
    for (size_t i = 0; i < want.size(); ++i) {
      const auto* w = static_cast<const uint8_t*>(want[i].data) + want[i].offset * 2;
      if (std::memcmp(w, buffers_[i].data(), buffers_[i].size()) != 0) {
        bad_.push_back("v" + std::to_string(v) + " tensor '" + want[i].name + "'");
      }
    }
  }

  ThreadPool pool_;
  std::unique_ptr<SyntheticModel> expected_;
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<TensorRef> refs_;
  mutable std::mutex mu_;
  std::set<uint64_t> held_;
  std::vector<std::string> bad_;
};

TEST(ShardProcess, APublisherRankKilledMidVersionLeavesItUncommittedAndTheGroupGoesOn) {
  GroupSpec spec;
  spec.publishers = 4;
  spec.subscribers = 3;
  spec.parameters = kParameters;
  spec.versions = 9;
  spec.anchor_every = 100;
  spec.step_interval_ms = 100;
  spec.extra_yaml = kLayouts;
  spec.subscriber_fields = {"layout: tp2, part: 0, replica: e0",
                            "layout: tp2, part: 1, replica: e0"};
  TestGroup g(spec);
  RankProcess coordinator(g.config_path(), 0, g.dir() + "/r0.log", g.coordinator_args());
  RankProcess part0(g.config_path(), 5, g.dir() + "/r5.log");
  RankProcess part1(g.config_path(), 6, g.dir() + "/r6.log");
  ModelEngine whole;
  auto engine = whole.connect(g, 7);
  ASSERT_NE(engine, nullptr);
  constexpr uint64_t kKilled = 4;
  std::vector<std::unique_ptr<RankProcess>> publishers;
  for (uint32_t r = 1; r <= 4; ++r) {
    if (r == 3) ::setenv("WEIGHTCAST_STOP_AT", "rank_fragment.written:4", 1);
    publishers.push_back(std::make_unique<RankProcess>(g.config_path(), r,
                                                       g.dir() + "/r" + std::to_string(r) + ".log",
                                                       std::vector<std::string>{"--stay"}));
    ::unsetenv("WEIGHTCAST_STOP_AT");
  }
  const auto logs = [&] {
    std::string out;
    for (const auto& p : publishers) out += "---- publisher\n" + p->log();
    return out + "---- part 0\n" + part0.log() + "---- part 1\n" + part1.log();
  };
  RankProcess& victim = *publishers[2];
  ASSERT_TRUE(eventually([&] { return stopped(victim.pid()); }, seconds(90)))
      << "rank 3 never reached its fault point\n"
      << logs();
  const JournalLayout layout(g.journal());
  victim.signal(SIGKILL);
  ASSERT_TRUE(victim.wait_exit(seconds(10)).has_value());
  // Version 4 is not committed anywhere: every engine holds exactly 3.
  ASSERT_TRUE(eventually([&] { return all_at(g, 3, kKilled - 1); }, seconds(60))) << logs();
  EXPECT_FALSE(std::filesystem::exists(layout.manifest(kKilled)));
  auto head = read_head_file(layout.head());
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->version(), kKilled - 1);

  publishers[2] = std::make_unique<RankProcess>(g.config_path(), 3, g.dir() + "/r3b.log",
                                                std::vector<std::string>{"--stay"});
  ASSERT_TRUE(eventually([&] { return all_at(g, 3, 9); }, seconds(120))) << logs();
  EXPECT_FALSE(std::filesystem::exists(layout.manifest(kKilled))) << "version 4 was committed";
  auto s = group_status(g.config());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(bad_results(*s), "") << logs();
  for (const auto& v : s->versions()) {
    EXPECT_NE(v.version(), kKilled) << "version 4 was offered";
  }
  // The lead gave up on 4 and made 5 an anchor; the whole engine matched the model at every
  // version it held, and never held 4.
  auto five = read_manifest_file(layout.manifest(5));
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->kind(), proto::STEP_ANCHOR);
  EXPECT_TRUE(whole.bad().empty()) << whole.bad().front();
  EXPECT_EQ(whole.held().count(kKilled), 0u);
  EXPECT_EQ(whole.held().count(9), 1u);
  EXPECT_NE(publishers[2]->log().find("holds no snapshot of version 3"), std::string::npos)
      << publishers[2]->log();
  engine->stop();
}

TEST(ShardProcess, ThePublisherRanksInRankOrderAreTheShards) {
  GroupSpec spec;
  spec.publishers = 3;
  spec.subscribers = 1;
  TestGroup g(spec);
  for (uint32_t r = 1; r <= 3; ++r) {
    auto place = shard_place(g.config(), r);
    ASSERT_TRUE(place.ok()) << place.status().message();
    EXPECT_EQ(place->shard, r - 1);
    EXPECT_EQ(place->shards, 3u);
  }
  auto subscriber = shard_place(g.config(), 4);
  EXPECT_NE(subscriber.status().message().find("rank 4 is not a publisher rank"), std::string::npos)
      << subscriber.status().message();
  proto::GroupConfig fp8 = g.config();
  fp8.mutable_fp8()->set_enabled(true);
  auto refused = shard_place(fp8, 2);
  EXPECT_NE(refused.status().message().find("an FP8 group (fp8.enabled) is published by one "
                                            "publisher rank; the config lists 3"),
            std::string::npos)
      << refused.status().message();
}

TEST(ShardProcess, EvenShardsTileTheModelAndCrossTensorBoundaries) {
  const std::vector<uint64_t> numels = {10, 3, 7};
  uint64_t covered = 0;
  for (uint32_t k = 0; k < 4; ++k) {
    for (const ShardSpan& s : even_shard(numels, k, 4)) {
      EXPECT_LE(s.first + s.count, numels[s.tensor]);
      covered += s.count;
    }
  }
  EXPECT_EQ(covered, 20u);
  const auto second = even_shard(numels, 1, 4);  // elements [5, 10) of tensor 0
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].first, 5u);
  const auto third = even_shard(numels, 2, 4);  // [10, 15): tensor 1 whole, tensor 2's first 2
  ASSERT_EQ(third.size(), 2u);
  EXPECT_EQ(third[0].tensor, 1u);
  EXPECT_EQ(third[1].tensor, 2u);
  EXPECT_EQ(third[1].count, 2u);
  EXPECT_TRUE(even_shard(numels, 0, 64).empty());  // more shards than elements: some own none
}

}  // namespace
}  // namespace weightcast::testing
