// Engine ranks that hold slices of the model (docs/CONFIG.md `layouts`) in a group, in one
// process against a coordinator thread: the two ranks of a tensor-parallel replica (one
// tensor split along its columns, one along its rows, one held whole) and a rank holding
// whole tensors follow deltas and a forced anchor with every slice bit-exact, each version
// committed by all three (the replica's slice checksums adding up); a rank of the layout
// joining late loads its slices from the anchor; registrations that do not fit the layout
// are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/group/slice_engine.h"
#include "tests/group/trainer_side.h"

namespace weightcast {
namespace {

using namespace weightcast::testing;
using std::chrono::seconds;

GroupSpec layout_group() {
  GroupSpec spec;
  spec.subscribers = 3;
  spec.anchor_every = 100;
  spec.extra_yaml = kLayouts;
  spec.subscriber_fields = {"layout: tp2, part: 0, replica: e0",
                            "layout: tp2, part: 1, replica: e0"};
  return spec;
}

TEST(LayoutSubscriber, AReplicaOfSlicesAndAWholeEngineFollowDeltasAndAnAnchor) {
  TestGroup g(layout_group());
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  SliceEngine part0{0}, part1{1};
  Weights whole;
  std::vector<std::string> bad;
  auto s2 = connect_slices(g, 2, part0);
  auto s3 = connect_slices(g, 3, part1);
  auto s4 = connect_engine(g, one_thread<SubscriberOptions>(4), whole, bad);
  ASSERT_TRUE(s2 && s3 && s4);
  for (uint64_t v = 0; v <= 5; ++v) {
    t.trainer.set(v);
    auto h = t.publisher->publish(v, /*force_anchor=*/v == 4);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    const Status committed = h->wait_committed(in(seconds(30)));
    ASSERT_TRUE(committed.ok()) << "v" << v << ": " << committed.to_string();
    ASSERT_TRUE(s2->wait_for_version(v, in(seconds(30))).ok());
    ASSERT_TRUE(s3->wait_for_version(v, in(seconds(30))).ok());
    EXPECT_TRUE(part0.holds(v)) << "part 0 at v" << v;
    EXPECT_TRUE(part1.holds(v)) << "part 1 at v" << v;
    EXPECT_TRUE(engine_at(*s4, whole, v));
  }
  EXPECT_TRUE(bad.empty());
  const auto status = group_status(g.config());
  ASSERT_TRUE(status.has_value());
  for (uint32_t rank : {2u, 3u, 4u}) EXPECT_EQ(acked_transport(*status, 5, rank), "fs") << rank;
  // A rank of the layout that joins now loads its slices from anchor 4, then applies 5.
  s3->stop();
  SliceEngine late{1};
  auto again = connect_slices(g, 3, late);
  ASSERT_TRUE(again);
  ASSERT_TRUE(again->wait_for_version(5, in(seconds(30))).ok());
  EXPECT_TRUE(late.holds(5));
  EXPECT_EQ(again->stats().anchors_loaded, 1u);
}

TEST(LayoutSubscriber, RegistrationsThatDoNotFitTheLayoutAreRefusedByName) {
  TestGroup g(layout_group());
  auto s = Subscriber::create(g.config(), one_thread<SubscriberOptions>(2));
  ASSERT_TRUE(s.ok());
  std::vector<uint16_t> bytes(1000);
  const Status whole =
      (*s)->register_tensor(TensorRef::contiguous("vec", DType::kBF16, bytes.data(), 1000));
  EXPECT_NE(whole.message().find("tensor 'vec': part 0 of layout 'tp2' holds its slice [0:500]; "
                                 "register it with register_slice"),
            std::string::npos)
      << whole.message();
  const Status size =
      (*s)->register_slice(TensorRef::contiguous("vec", DType::kBF16, bytes.data(), 400), {1000});
  EXPECT_NE(size.message().find("the destination has 400 elements but slice [0:500]"),
            std::string::npos)
      << size.message();
  auto plain = Subscriber::create(g.config(), one_thread<SubscriberOptions>(4));
  ASSERT_TRUE(plain.ok());
  const Status no_layout = (*plain)->register_slice(
      TensorRef::contiguous("vec", DType::kBF16, bytes.data(), 500), {1000});
  EXPECT_NE(no_layout.message().find("rank 4 names no layout"), std::string::npos)
      << no_layout.message();
}

// weightcastd subscribers of a layout (no engine: register_from_journal allocates only their
// slices) beside one holding whole tensors, against a weightcastd publisher of the demo model:
// every version commits with all three acking it (each rank verified its slices against the
// manifests, and the replica's slice checksums added up at the coordinator).
TEST(LayoutSubscriber, WeightcastdRanksOfALayoutHoldOnlyTheirSlicesAndCommitEveryVersion) {
  GroupSpec spec = layout_group();
  spec.versions = 6;
  spec.extra_yaml = R"(layouts:
  - name: tp2
    parts: 2
    rules:
      - {match: '.*\.(q|k|v|gate|up)_proj\.weight', dim: 0}
      - {match: '.*\.(o|down)_proj\.weight', dim: 1}
      - {match: '.*embed_tokens\.weight', dim: 0}
)";
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  RankProcess sub2(g.config_path(), 2, g.dir() + "/r2.log");
  RankProcess sub3(g.config_path(), 3, g.dir() + "/r3.log");
  RankProcess sub4(g.config_path(), 4, g.dir() + "/r4.log");
  RankProcess publisher(g.config_path(), 1, g.dir() + "/r1.log", {"--stay"});
  const auto all = [&] { return publisher.log() + sub2.log() + sub3.log() + sub4.log(); };
  const auto at_last = [&] {
    auto st = group_status(g.config());
    if (!st || !st->has_committed() || st->committed_version() < spec.versions) return false;
    for (uint32_t rank : {2u, 3u, 4u}) {
      if (acked_transport(*st, spec.versions, rank).empty()) return false;
    }
    return true;
  };
  ASSERT_TRUE(eventually(at_last, seconds(60))) << all();
  auto st = group_status(g.config());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(bad_results(*st), "") << all();
  // Each layout rank holds its slices of the split tensors and the rest whole: less than the
  // rank holding every tensor whole.
  std::map<uint32_t, uint64_t> engine;
  for (const auto& v : st->versions()) {
    for (const auto& r : v.results())
      engine[r.rank()] = std::max(engine[r.rank()], r.engine_bytes());
  }
  EXPECT_GT(engine[4], 0u);
  EXPECT_LT(engine[2], engine[4]);
  EXPECT_LT(engine[3], engine[4]);
}

}  // namespace
}  // namespace weightcast
