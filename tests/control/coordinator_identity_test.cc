// The coordinator tells processes and journals apart: a second process claiming a live rank
// (another Hello nonce) is refused naming both; versions belong to one journal, so a
// subscriber holding another journal's version is not at the head, and a replaced journal
// (another id in HEAD or an offer) sends every subscriber to reload from an anchor.
#include <gtest/gtest.h>

#include "tests/control/coordinator_state_harness.h"

namespace weightcast::coordinator_test {
namespace {

proto::Envelope hello_from(uint32_t rank, uint64_t nonce, uint32_t pid,
                           const std::string& extra = "") {
  proto::Envelope e =
      hello(rank, rank == 1 ? proto::ROLE_PUBLISHER : proto::ROLE_SUBSCRIBER, extra);
  e.mutable_hello()->set_nonce(nonce);
  e.mutable_hello()->set_pid(pid);
  return e;
}

TEST(CoordinatorIdentity, ASecondProcessForALiveRankIsRefusedNamingBoth) {
  Group g;
  g.send(2, hello_from(2, 111, 4001));
  ASSERT_EQ(g.member_state(2), "live");
  g.state.take_events();
  const auto out = g.state.on_message("sub2-other", hello_from(2, 222, 4002), g.now);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "sub2-other");
  ASSERT_TRUE(out[0].message.has_refuse());
  const std::string why = out[0].message.refuse().reason();
  EXPECT_FALSE(out[0].message.refuse().fatal());  // it may take the rank once the first is gone
  EXPECT_NE(why.find("pid 4001"), std::string::npos) << why;
  EXPECT_NE(why.find("pid 4002"), std::string::npos) << why;
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kRefused, 2));
  // The first keeps the rank: its messages are still accepted from its peer.
  EXPECT_TRUE(g.send(2, msg(2, "heartbeat {}")).empty());
  const proto::StatusReply s = g.state.status(g.now);
  ASSERT_EQ(s.members_size(), 1);
  EXPECT_EQ(s.members(0).pid(), 4001u);
}

TEST(CoordinatorIdentity, TheSameProcessSayingHelloAgainIsWelcomed) {
  Group g;
  g.send(2, hello_from(2, 111, 4001));
  const auto out = g.state.on_message("sub2-reconnected", hello_from(2, 111, 4001), g.now);
  EXPECT_EQ(peers(out, Body::kWelcome), Peers{"sub2-reconnected"});
}

TEST(CoordinatorIdentity, AnotherProcessTakesTheRankOnceTheHolderIsSilent) {
  Group g;
  g.send(2, hello_from(2, 111, 4001));
  g.tick_after(std::chrono::milliseconds(600));
  EXPECT_EQ(peers(g.state.on_message("sub2-b", hello_from(2, 222, 4002), g.now), Body::kRefuse),
            Peers{"sub2-b"});
  g.tick_after(std::chrono::milliseconds(600));  // 1.2 s silent: dropped (dead_after 1 s)
  EXPECT_EQ(g.member_state(2), "dead");
  EXPECT_EQ(peers(g.state.on_message("sub2-b", hello_from(2, 222, 4002), g.now), Body::kWelcome),
            Peers{"sub2-b"});
}

TEST(CoordinatorIdentity, AVersionOfAnotherJournalIsNotTheHead) {
  Group g;
  g.state.restore_head(7, 5, checksums_of(7), g.now, "aaaa");
  auto same = g.send(
      2, hello_from(2, 1, 10, "holds_version: true held_version: 7 held_journal_id: 'aaaa'"));
  EXPECT_EQ(only(same, Body::kWelcome).welcome().plan(), "live");
  EXPECT_EQ(only(same, Body::kWelcome).welcome().journal_id(), "aaaa");
  auto other = g.send(
      3, hello_from(3, 2, 11, "holds_version: true held_version: 7 held_journal_id: 'bbbb'"));
  EXPECT_EQ(only(other, Body::kWelcome).welcome().plan(), "catch_up");
}

TEST(CoordinatorIdentity, AReplacedJournalSendsEverySubscriberToAnAnchor) {
  Group g;
  g.state.restore_head(7, 5, checksums_of(7), g.now, "aaaa");
  g.join(1);
  g.join(2, 7);
  g.join(3, 7);
  ASSERT_EQ(g.state.committed(), 7u);
  const auto out =
      g.state.on_journal_replaced(2, 0, checksums_of(2), "bbbb", "journal replaced", g.now);
  EXPECT_EQ(peers(out, Body::kRecover), (Peers{"sub2", "sub3"}));
  for (const auto& m : out) {
    if (!m.message.has_recover()) continue;
    EXPECT_TRUE(m.message.recover().from_anchor());
    EXPECT_EQ(m.message.recover().target_version(), 2u);
    EXPECT_EQ(m.message.recover().journal_id(), "bbbb");
  }
  EXPECT_EQ(g.state.head(), 2u);
  EXPECT_FALSE(g.state.committed().has_value());
  EXPECT_EQ(g.state.journal_id(), "bbbb");
  EXPECT_EQ(g.member_state(2), "catch_up");
  // An ack of the new journal's head makes a subscriber live again and commits it.
  EXPECT_EQ(peers(g.send(2, ack(2, 2)), Body::kCommit), (Peers{"pub", "sub2", "sub3"}));
  EXPECT_EQ(g.state.committed(), 2u);
  EXPECT_EQ(g.member_state(2), "live");
  EXPECT_TRUE(g.send(3, ack(3, 2)).empty());
  EXPECT_EQ(g.member_state(3), "live");
}

TEST(CoordinatorIdentity, AnOfferOfAnotherJournalReplacesTheOldVersions) {
  Group g;
  g.join_all({1, 2});
  proto::Envelope first = msg(1, "offer { version: 9 journal_id: 'aaaa' }");
  for (const auto& c : checksums_of(9)) *first.mutable_offer()->add_checksums() = c;
  g.send(1, first);
  g.send(2, ack(2, 9));
  ASSERT_EQ(g.state.committed(), 9u);
  proto::Envelope other = msg(1, "offer { version: 1 journal_id: 'bbbb' anchor: true }");
  for (const auto& c : checksums_of(1)) *other.mutable_offer()->add_checksums() = c;
  const auto out = g.send(1, other);
  EXPECT_EQ(peers(out, Body::kRecover), Peers{"sub2"});
  EXPECT_EQ(peers(out, Body::kOffer), Peers{"sub2"});  // the new version 1 is offered, not ignored
  EXPECT_EQ(only(out, Body::kOffer).offer().journal_id(), "bbbb");
  EXPECT_EQ(g.state.head(), 1u);
  g.send(2, ack(2, 1));
  EXPECT_EQ(g.member_state(2), "live");
  EXPECT_EQ(g.state.committed(), 1u);
  EXPECT_EQ(g.result(1, 2), "ok");
}

}  // namespace
}  // namespace weightcast::coordinator_test
