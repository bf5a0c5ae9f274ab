// Membership epochs of the NCCL transport (src/control/nccl_epochs.h): who is in each
// communicator, in which NCCL rank order, from which version, and who falls back meanwhile.
#include <gtest/gtest.h>

#include "src/control/nccl_epochs.h"

namespace weightcast {
namespace {

TEST(NcclEpochs, FirstEpochStartsAtTheNextVersionWithPublishersFirst) {
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
  EXPECT_TRUE(e.over_nccl(3, 10));
  EXPECT_TRUE(e.over_nccl(5, 11));
  EXPECT_FALSE(e.over_nccl(2, 10));               // the publisher sends; it does not receive
  EXPECT_FALSE(e.over_nccl(3, 9));                // before the epoch
  EXPECT_FALSE(e.begin_version(11).has_value());  // nothing changed: the epoch goes on
  EXPECT_EQ(e.current()->epoch, 1u);
}

TEST(NcclEpochs, AJoinOrALeaveEndsTheEpochAndTheNextVersionStartsANewOne) {
  NcclEpochs e;
  e.joined(1, true);
  e.joined(2, false);
  ASSERT_TRUE(e.begin_version(1).has_value());
  e.joined(3, false);  // a late engine
  EXPECT_FALSE(e.over_nccl(3, 1));
  EXPECT_FALSE(e.over_nccl(2, 1)) << "a changed membership is not trusted until rebuilt";
  auto second = e.begin_version(2);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->epoch, 2u);
  EXPECT_EQ(second->ranks, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_TRUE(e.over_nccl(3, 2));
  e.left(2);
  auto third = e.begin_version(3);
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->epoch, 3u);
  EXPECT_EQ(third->ranks, (std::vector<uint32_t>{1, 3}));
  e.left(9);  // not a member: nothing changes
  EXPECT_FALSE(e.begin_version(4).has_value());
  e.joined(3, false);  // a repeated Hello: nothing changes
  EXPECT_FALSE(e.begin_version(5).has_value());
  EXPECT_EQ(e.current()->epoch, 3u);
}

TEST(NcclEpochs, NoEpochWithoutAPublisherOrWithoutASubscriber) {
  NcclEpochs e;
  e.joined(4, false);
  EXPECT_FALSE(e.begin_version(1).has_value());
  EXPECT_EQ(e.current(), nullptr);
  EXPECT_FALSE(e.over_nccl(4, 1));
  e.joined(0, true);
  ASSERT_TRUE(e.begin_version(2).has_value());
  e.left(4);
  EXPECT_FALSE(e.begin_version(3).has_value());  // only the publisher is left
  EXPECT_EQ(e.current(), nullptr);
  e.joined(6, false);
  auto again = e.begin_version(4);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->epoch, 2u);  // epochs count communicators actually formed
}

}  // namespace
}  // namespace weightcast
