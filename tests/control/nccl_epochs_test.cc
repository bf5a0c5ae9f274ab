// Membership epochs of the NCCL transport (src/control/nccl_epochs.h): who is in each
// communicator, in which NCCL rank order, when it is ready, what ends it, and who falls back
// meanwhile.
#include <gtest/gtest.h>

#include <string>

#include "src/control/nccl_epochs.h"

namespace weightcast {
namespace {

// Forms the epoch begun at `version`: rank 0 makes the id, every member joins.
NcclEpoch form(NcclEpochs& e, uint64_t version) {
  auto started = e.begin_version(version);
  EXPECT_TRUE(started.has_value());
  if (!started) return {};
  EXPECT_TRUE(e.set_group_id(started->epoch, "id"));
  for (size_t i = 0; i < started->ranks.size(); ++i) {
    EXPECT_EQ(e.member_joined(started->epoch, started->ranks[i]), i + 1 == started->ranks.size());
  }
  return *e.current();
}

TEST(NcclEpochs, FirstEpochFormsAtTheNextVersionWithPublishersFirst) {
  NcclEpochs e;
  e.joined(5, false);
  e.joined(2, true);
  e.joined(3, false);
  auto first = e.begin_version(10);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->epoch, 1u);
  EXPECT_EQ(first->from_version, 10u);
  EXPECT_EQ(first->ranks, (std::vector<uint32_t>{2, 3, 5}));
  EXPECT_EQ(first->publishers, 1u);
  EXPECT_EQ(first->nccl_rank(2), 0);
  EXPECT_EQ(first->nccl_rank(5), 2);
  EXPECT_FALSE(first->nccl_rank(7).has_value());
  EXPECT_FALSE(first->ready);
  EXPECT_FALSE(e.over_nccl(3, 1)) << "a forming epoch carries nothing";

  EXPECT_FALSE(e.set_group_id(2, "stale")) << "not the epoch in force";
  EXPECT_TRUE(e.set_group_id(1, "id-1"));
  EXPECT_FALSE(e.set_group_id(1, "again")) << "the id is made once";
  EXPECT_FALSE(e.member_joined(1, 2));
  EXPECT_FALSE(e.member_joined(1, 7)) << "not a member";
  EXPECT_FALSE(e.member_joined(1, 3));
  EXPECT_FALSE(e.member_joined(9, 5)) << "a stale epoch";
  EXPECT_TRUE(e.member_joined(1, 5));
  EXPECT_TRUE(e.current()->ready);
  EXPECT_EQ(e.current()->group_id, "id-1");

  EXPECT_TRUE(e.over_nccl(3, 1));
  EXPECT_TRUE(e.over_nccl(5, 1));
  EXPECT_FALSE(e.over_nccl(2, 1)) << "the publisher sends; it does not receive";
  EXPECT_FALSE(e.over_nccl(3, 0)) << "a version offered without an epoch";
  EXPECT_FALSE(e.over_nccl(3, 2)) << "a version offered with another epoch";
  EXPECT_FALSE(e.begin_version(11).has_value()) << "nothing changed: the epoch goes on";
  EXPECT_EQ(e.current()->epoch, 1u);
}

TEST(NcclEpochs, AJoinRebuildsAtTheNextVersionWhileTheMembersOfTheOldEpochStayOnIt) {
  NcclEpochs e;
  e.joined(1, true);
  e.joined(2, false);
  form(e, 1);
  EXPECT_FALSE(e.joined(3, false).has_value()) << "a late engine does not break the epoch";
  EXPECT_TRUE(e.over_nccl(2, 1)) << "until the next version, members stay on their epoch";
  EXPECT_FALSE(e.over_nccl(3, 1));
  auto second = e.begin_version(2);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->epoch, 2u);
  EXPECT_EQ(second->ranks, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_FALSE(e.over_nccl(2, 1)) << "the old epoch ended when the new one started";
  EXPECT_FALSE(e.over_nccl(2, 2)) << "the new one is still forming";
}

TEST(NcclEpochs, AMemberLeavingOrRestartingEndsTheEpochAtOnce) {
  NcclEpochs e;
  e.joined(1, true);
  e.joined(2, false);
  e.joined(3, false);
  form(e, 1);
  EXPECT_FALSE(e.left(9).has_value()) << "not a member: nothing ends";
  auto ended = e.left(2);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->epoch, 1u);
  EXPECT_EQ(e.current(), nullptr);
  EXPECT_FALSE(e.over_nccl(3, 1));
  NcclEpoch second = form(e, 2);
  EXPECT_EQ(second.ranks, (std::vector<uint32_t>{1, 3}));

  auto restarted = e.joined(3, false);  // Hello again from a member: it lost its communicator
  ASSERT_TRUE(restarted.has_value());
  EXPECT_EQ(restarted->epoch, second.epoch);
  NcclEpoch third = form(e, 3);
  EXPECT_EQ(third.ranks, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(third.epoch, 3u);
}

TEST(NcclEpochs, AFailureEndsTheEpochAndTheNextVersionRebuildsWithTheSameMembers) {
  NcclEpochs e;
  e.joined(1, true);
  e.joined(2, false);
  form(e, 1);
  auto ended = e.end();
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->epoch, 1u);
  EXPECT_FALSE(e.end().has_value()) << "nothing left to end";
  EXPECT_FALSE(e.over_nccl(2, 1));
  auto again = e.begin_version(5);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->epoch, 2u);
  EXPECT_EQ(again->ranks, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(again->from_version, 5u);
}

TEST(NcclEpochs, OnlyThePublisherOfLowestRankRootsAnEpoch) {
  NcclEpochs e;
  e.joined(7, true);
  e.joined(3, true);
  e.joined(5, false);
  auto first = e.begin_version(1);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->ranks, (std::vector<uint32_t>{3, 5}));
  EXPECT_EQ(first->publishers, 1u);
  ASSERT_TRUE(e.left(3).has_value());
  auto second = e.begin_version(2);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->ranks, (std::vector<uint32_t>{7, 5}))
      << "the next publisher roots the next epoch";
  EXPECT_FALSE(e.left(9).has_value());
}

TEST(NcclEpochs, EpochsThatKeepFailingAreSuspendedUntilMembershipChanges) {
  NcclEpochs e;
  e.joined(1, true);
  e.joined(2, false);
  for (uint64_t v = 1; v <= NcclEpochs::kMaxFailedEpochs; ++v) {
    EXPECT_FALSE(e.suspended());
    form(e, v);
    ASSERT_TRUE(e.end().has_value());
  }
  EXPECT_TRUE(e.suspended());
  EXPECT_FALSE(e.begin_version(10).has_value()) << "suspended";
  e.joined(3, false);  // new membership: worth another try
  EXPECT_FALSE(e.suspended());
  form(e, 11);
  ASSERT_TRUE(e.end().has_value());
  e.carried();  // a version got through: the count starts again
  form(e, 12);
  ASSERT_TRUE(e.end().has_value());
  form(e, 13);
  ASSERT_TRUE(e.end().has_value());
  EXPECT_FALSE(e.suspended()) << "two failures since the last carried version";
  ASSERT_TRUE(e.begin_version(14).has_value());
  EXPECT_FALSE(e.left(2)->ready) << "a leave is not a failure";
  EXPECT_FALSE(e.suspended());
}

TEST(NcclDescriptor, NamesAnEpochAndNothingElseParses) {
  EXPECT_EQ(nccl_descriptor_epoch(nccl_descriptor(7)), 7u);
  EXPECT_EQ(nccl_descriptor_epoch(nccl_descriptor(0)), std::nullopt) << "epoch 0 is none";
  EXPECT_EQ(nccl_descriptor_epoch(""), std::nullopt);
  EXPECT_EQ(nccl_descriptor_epoch(std::string("\xff\xff", 2)), std::nullopt);
}

TEST(NcclEpochs, NoEpochWithoutAPublisherOrWithoutASubscriber) {
  NcclEpochs e;
  e.joined(4, false);
  EXPECT_FALSE(e.begin_version(1).has_value());
  EXPECT_EQ(e.current(), nullptr);
  EXPECT_FALSE(e.over_nccl(4, 1));
  e.joined(0, true);
  ASSERT_TRUE(e.begin_version(2).has_value());
  ASSERT_TRUE(e.left(4).has_value());
  EXPECT_FALSE(e.begin_version(3).has_value());  // only the publisher is left
  EXPECT_EQ(e.current(), nullptr);
  e.joined(6, false);
  auto again = e.begin_version(4);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->epoch, 2u);  // epochs count communicators actually started
}

}  // namespace
}  // namespace weightcast
