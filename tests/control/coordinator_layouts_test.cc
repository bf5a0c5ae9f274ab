// Subscribers holding slices of an engine layout (docs/CONFIG.md `layouts`): the coordinator
// takes their acks of slice checksums, checks the tensors their layout keeps whole as for any
// rank, and checks that the slice checksums of each split tensor, over the ranks of one
// replica, add up to the version's; the rank whose ack completes a replica that does not add
// up is refused as a mismatch. A replica is committed on its own: its ranks are told of a
// version once every one of them acked it.
#include <gtest/gtest.h>

#include "tests/control/coordinator_state_harness.h"

namespace weightcast::coordinator_test {
namespace {

// Ranks 2 and 3 are parts 0 and 1 of replica e0 of layout tp2, which splits tensor "b"; rank
// 4 holds whole tensors.
CoordinatorSettings layout_settings() {
  CoordinatorSettings s = test_settings();
  proto::GroupConfig config;
  auto* layout = config.add_layouts();
  layout->set_name("tp2");
  layout->set_parts(2);
  auto* rule = layout->add_rules();
  rule->set_match("b");
  rule->set_dim(0);
  auto rules = LayoutRules::compile(config);
  EXPECT_TRUE(rules.ok());
  s.layout_rules = std::make_shared<const LayoutRules>(std::move(*rules));
  s.layout_parts = {{"tp2", 2}};
  s.layout_ranks = {{2, {"tp2", "e0", 0}}, {3, {"tp2", "e0", 1}}};
  return s;
}

// An ack of `v` whose checksum of "a" is the version's and of "b" is `b`.
proto::Envelope slice_ack(uint32_t rank, uint64_t v, uint64_t b, uint64_t a_offset = 0) {
  return msg(rank, "ack { version: " + std::to_string(v) +
                       " checksums { name: 'a' checksum: " + std::to_string(v * 100 + a_offset) +
                       " } checksums { name: 'b' checksum: " + std::to_string(b) + " } }");
}

TEST(CoordinatorLayouts, AReplicaWhoseSlicesAddUpCommits) {
  Group g(layout_settings());
  g.join_all({1, 2, 3, 4});
  g.publish(1);  // a = 100, b = 101
  EXPECT_TRUE(g.send(4, ack(4, 1)).empty());
  EXPECT_TRUE(g.send(2, slice_ack(2, 1, 60)).empty());
  EXPECT_EQ(g.result(1, 2), "ok");
  const auto out = g.send(3, slice_ack(3, 1, 41));
  EXPECT_EQ(g.result(1, 3), "ok");
  // The replica's ranks are told with their replica, after the others.
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub4", "sub2", "sub3"}));
  EXPECT_EQ(g.state.committed(), 1u);
}

TEST(CoordinatorLayouts, TheAckCompletingAReplicaThatDoesNotAddUpIsAMismatch) {
  Group g(layout_settings());
  g.join_all({1, 2, 3});
  g.publish(1);
  EXPECT_TRUE(g.send(2, slice_ack(2, 1, 60)).empty());
  const auto out = g.send(3, slice_ack(3, 1, 40));
  EXPECT_EQ(g.result(1, 3), "mismatch");
  expect_recover(out, "sub3", 1, true,
                 "the slice checksums of tensor 'b' acked by replica 'e0' of layout 'tp2' "
                 "(ranks 2, 3) do not add up");
  // As for any rank whose ack does not match: it recovers from an anchor (and verifies that
  // against the manifest's slice checksums), and the version commits without it.
  EXPECT_EQ(g.state.committed(), std::optional<uint64_t>(1));
  // Its next ack, right this time, completes the replica again.
  (void)g.send(3, slice_ack(3, 1, 41));
  EXPECT_EQ(g.result(1, 3), "ok");
}

TEST(CoordinatorLayouts, AReplicaWithARankThatRefusedIsNotCommittedWhileAnotherIs) {
  CoordinatorSettings settings = layout_settings();
  settings.layout_ranks[4] = {"tp2", "e1", 0};
  settings.layout_ranks[5] = {"tp2", "e1", 1};
  for (const uint32_t r : {5u, 6u}) settings.roles[r] = proto::ROLE_SUBSCRIBER;
  Group g(settings);
  g.join_all({1, 2, 3, 4, 5, 6});
  g.publish(1);  // b = 101
  for (const uint32_t r : {2u, 4u}) EXPECT_TRUE(g.send(r, slice_ack(r, 1, 60)).empty());
  EXPECT_TRUE(g.send(6, ack(6, 1)).empty());
  // Rank 3 refuses version 1 (its slice did not verify); rank 5 completes replica e1.
  auto out = g.send(3, msg(3, "nack { version: 1 reason: 'slice checksum mismatch' }"));
  EXPECT_EQ(peers(out, Body::kRecover), Peers{"sub3"});
  EXPECT_TRUE(peers(out, Body::kCommit).empty());
  out = g.send(5, slice_ack(5, 1, 41));
  // The group commits version 1, and replica e1 with it; replica e0 is not committed: its
  // rank 2 holds version 1 but is not told so while rank 3 does not.
  EXPECT_EQ(g.state.committed(), 1u);
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub6", "sub4", "sub5"}));
  proto::StatusReply status = g.state.status(g.now);
  ASSERT_EQ(status.replicas_size(), 2);
  EXPECT_EQ(status.replicas(0).replica(), "e0");
  EXPECT_FALSE(status.replicas(0).has_committed());
  EXPECT_EQ(status.replicas(1).replica(), "e1");
  EXPECT_EQ(status.replicas(1).committed_version(), 1u);
  // Version 2 commits with the live ranks, e1 follows, e0 still waits for rank 3.
  g.publish(2);
  for (const uint32_t r : {2u, 4u}) EXPECT_TRUE(g.send(r, slice_ack(r, 2, 100)).empty());
  EXPECT_TRUE(g.send(6, ack(6, 2)).empty());
  out = g.send(5, slice_ack(5, 2, 101));
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub6", "sub4", "sub5"}));
  // Rank 3 recovered to version 2: replica e0 is committed at 2, both its ranks are told.
  out = g.send(3, slice_ack(3, 2, 101));
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"sub2", "sub3"}));
  for (const auto& m : out) {
    if (m.message.has_commit()) {
      EXPECT_EQ(m.message.commit().version(), 2u) << m.peer;
    }
  }
  status = g.state.status(g.now);
  EXPECT_EQ(status.replicas(0).committed_version(), 2u);
}

TEST(CoordinatorLayouts, ATensorTheLayoutKeepsWholeIsCheckedOnEachRank) {
  Group g(layout_settings());
  g.join_all({1, 2, 3});
  g.publish(1);
  const auto out = g.send(2, slice_ack(2, 1, 60, /*a_offset=*/1));
  EXPECT_EQ(g.result(1, 2), "mismatch");
  expect_recover(out, "sub2", 1, true, "checksum of tensor 'a' does not match");
}

}  // namespace
}  // namespace weightcast::coordinator_test
