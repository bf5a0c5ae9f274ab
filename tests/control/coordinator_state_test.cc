// The coordinator's state machine driven by hand (coordinator_state_harness.h): Hellos,
// offers, acks and ticks go in with a fake clock; the messages to send, status, commits and
// events are checked.
#include "src/control/coordinator_state.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/control/coordinator_state_harness.h"

namespace weightcast::coordinator_test {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> transports(const proto::Welcome& w) {
  return {w.transports().begin(), w.transports().end()};
}

using Names = std::vector<std::string>;

TEST(CoordinatorState, SubscriberJoinsLiveWithoutAHead) {
  Group g;
  const auto out = g.join(2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "sub2");
  EXPECT_TRUE(out[0].message.from_coordinator());
  const proto::Welcome& w = out[0].message.welcome();
  EXPECT_EQ(w.protocol(), 1u);
  EXPECT_FALSE(w.has_head());
  EXPECT_EQ(w.plan(), "live");
  EXPECT_EQ(transports(w), Names{"fs"});
  EXPECT_EQ(w.journal_root(), "/journal");
  EXPECT_EQ(g.member_state(2), "live");
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kJoined, 2));
}

TEST(CoordinatorState, SubscriberPlanFollowsTheHeadItHolds) {
  Group g;
  g.state.restore_head(5, 4, checksums_of(5), g.now);
  const proto::Welcome at_head = only(g.join(2, 5), Body::kWelcome).welcome();
  EXPECT_EQ(at_head.plan(), "live");
  EXPECT_EQ(at_head.head_version(), 5u);
  EXPECT_EQ(at_head.anchor_version(), 4u);
  EXPECT_EQ(only(g.join(3, 3), Body::kWelcome).welcome().plan(), "catch_up");
  EXPECT_EQ(only(g.join(4), Body::kWelcome).welcome().plan(), "catch_up");
  EXPECT_EQ(g.member_state(2), "live");
  EXPECT_EQ(g.member_state(3), "catch_up");
  EXPECT_EQ(g.state.status(g.now).members(1).lag(), 2u);
}

TEST(CoordinatorState, PublisherJoinsOnTheHighestCommonProtocolAndPreferredTransport) {
  CoordinatorSettings s = test_settings();
  s.transports = {"ucx", "fs"};
  s.protocol_max = 2;
  Group g(s);
  const auto out = g.send(1, hello(1, proto::ROLE_PUBLISHER,
                                   "protocol_min: 1 protocol_max: 3 transports: ['fs', 'ucx']"));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "pub");
  EXPECT_EQ(out[0].message.protocol(), 2u);
  EXPECT_EQ(out[0].message.welcome().protocol(), 2u);
  EXPECT_EQ(out[0].message.welcome().plan(), "live");
  EXPECT_EQ(transports(out[0].message.welcome()), (Names{"ucx", "fs"})) << "the config's order";
  EXPECT_EQ(transports(only(g.join(2), Body::kWelcome).welcome()), Names{"fs"});
  EXPECT_EQ(g.member_state(1), "live");
}

TEST(CoordinatorState, ARanksPathsEndAtTheJournal) {
  CoordinatorSettings s = test_settings();
  s.transports = {"ucx", "fs", "nccl"};
  Group g(s);
  const auto out = g.send(2, hello(2, proto::ROLE_SUBSCRIBER, "transports: ['nccl', 'fs', 'ucx']"));
  EXPECT_EQ(transports(only(out, Body::kWelcome).welcome()), (Names{"ucx", "fs"}))
      << "the journal carries every version: nccl after it is never needed";
  EXPECT_EQ(g.state.status(g.now).members(0).transport(), "ucx") << "the path it prefers";
}

TEST(CoordinatorState, LiveDescriptorsReachOnlyTheSubscribersGivenTheirPath) {
  CoordinatorSettings s = test_settings();
  s.transports = {"ucx", "fs"};
  Group g(s);
  g.join(1);
  g.send(2, hello(2, proto::ROLE_SUBSCRIBER, "transports: ['fs', 'ucx']"));
  g.join(3);  // fs only
  proto::Envelope e = msg(1, "offer { version: 1 }");
  (*e.mutable_offer()->mutable_live_descriptors())["ucx"] = "blob";
  (*e.mutable_offer()->mutable_live_descriptors())["shm"] = "not a path of this group";
  std::map<std::string, std::vector<std::string>> got;
  for (const auto& m : g.send(1, e)) {
    if (!m.message.has_offer()) continue;
    for (const auto& [path, d] : m.message.offer().live_descriptors()) {
      got[m.peer].push_back(path + "=" + d);
    }
  }
  EXPECT_EQ(got, (std::map<std::string, std::vector<std::string>>{{"sub2", {"ucx=blob"}}}));
}

TEST(CoordinatorState, ProtocolMismatchIsRefusedFatally) {
  Group g;
  g.expect_refused(2, hello(2, proto::ROLE_SUBSCRIBER, "protocol_min: 5 protocol_max: 6"), true,
                   "speaks control protocol 5..6, this coordinator speaks 1..1");
}

TEST(CoordinatorState, UnknownRankIsRefused) {
  Group g;
  g.expect_refused(9, hello(9, proto::ROLE_SUBSCRIBER), true, "rank 9 is not in group 'g'");
}

TEST(CoordinatorState, WrongRoleIsRefused) {
  Group g;
  g.expect_refused(2, hello(2, proto::ROLE_PUBLISHER), true, "configured as a subscriber");
}

TEST(CoordinatorState, NoCommonTransportIsRefused) {
  Group g;
  g.expect_refused(3, hello(3, proto::ROLE_SUBSCRIBER, "transports: ['ucx', 'nccl']"), true,
                   "none of the group's transports (fs)");
}

TEST(CoordinatorState, ObserverIsWelcomedWithoutMembership) {
  Group g;
  const auto out = g.state.on_message("cli", hello(77, proto::ROLE_OBSERVER), g.now);
  EXPECT_EQ(only(out, Body::kWelcome).welcome().protocol(), 1u);
  EXPECT_EQ(g.state.status(g.now).members_size(), 0);
  const auto later = g.state.on_message("cli", msg(77, "heartbeat {}"), g.now);
  EXPECT_FALSE(only(later, Body::kRefuse).refuse().fatal());
}

TEST(CoordinatorState, StatusRequestIsAnsweredWithoutHello) {
  Group g;
  g.state.restore_head(3, std::nullopt, checksums_of(3), g.now);
  const auto out = g.state.on_message("cli", msg(0, "status_request {}"), g.now);
  ASSERT_EQ(peers(out, Body::kStatusReply), Peers{"cli"});
  EXPECT_EQ(out[0].message.status_reply().group_id(), "g");
  EXPECT_EQ(out[0].message.status_reply().head_version(), 3u);
}

TEST(CoordinatorState, MessageFromUnknownPeerGetsNonFatalRefuse) {
  Group g;
  g.expect_refused(3, ack(3, 1), false, "rank 3 is not known to the coordinator");
}

TEST(CoordinatorState, OfferGoesToEverySubscriberThatIsNotDead) {
  Group g;
  g.join_all({1, 2, 3, 4});
  EXPECT_TRUE(g.send(4, msg(4, "leave {}")).empty());
  const auto out = g.publish(1);
  EXPECT_EQ(peers(out, Body::kOffer), (Peers{"sub2", "sub3"}));
  EXPECT_TRUE(peers(out, Body::kCommit).empty());
  EXPECT_EQ(out[0].message.offer().checksums_size(), 2);
  EXPECT_EQ(g.state.head(), 1u);
  EXPECT_FALSE(g.state.committed().has_value());
  EXPECT_EQ(g.result(1, 2), "pending");
  EXPECT_EQ(g.result(1, 4), "none");
}

TEST(CoordinatorState, CommitsOnceEveryLiveSubscriberAckedMatchingChecksums) {
  Group g;
  g.join_all({1, 2, 3, 4});
  g.publish(1);
  EXPECT_TRUE(g.send(2, ack(2, 1)).empty());
  EXPECT_TRUE(g.send(3, ack(3, 1)).empty());
  EXPECT_FALSE(g.state.committed().has_value());
  const auto out = g.send(4, ack(4, 1));
  EXPECT_EQ(peers(out, Body::kCommit), kAllPeers);
  EXPECT_EQ(out[0].message.commit().version(), 1u);
  EXPECT_EQ(g.state.committed(), 1u);
  EXPECT_EQ(g.result(1, 3), "ok");
  // A watermark: acking 3 commits 2 as well.
  g.publish(2);
  g.publish(3);
  EXPECT_TRUE(g.send(2, ack(2, 3)).empty());
  EXPECT_TRUE(g.send(3, ack(3, 3)).empty());
  const auto later = g.send(4, ack(4, 3));
  ASSERT_EQ(peers(later, Body::kCommit), kAllPeers);
  EXPECT_EQ(later[0].message.commit().version(), 3u);
  const proto::StatusReply s = g.state.status(g.now);
  EXPECT_TRUE(s.versions(1).committed());
  EXPECT_EQ(s.versions_in_flight(), 0u);
  // Version 2 was never acked: each subscriber passed it on the way to 3, and says so.
  for (uint32_t rank : {2u, 3u, 4u}) {
    EXPECT_EQ(g.result(2, rank), "passed") << "rank " << rank;
    EXPECT_EQ(g.result(3, rank), "ok") << "rank " << rank;
  }
}

TEST(CoordinatorState, AnUnackedVersionStaysPendingUntilALaterAckPassesIt) {
  Group g;
  g.join_all({1, 2, 3});
  g.publish(1);
  g.publish(2);
  EXPECT_TRUE(g.send(2, ack(2, 2)).empty());
  EXPECT_EQ(g.result(1, 2), "pending");  // not yet committed: sub3 has acked nothing
  EXPECT_EQ(peers(g.send(3, ack(3, 1)), Body::kCommit), (Peers{"pub", "sub2", "sub3"}));
  EXPECT_EQ(g.result(1, 2), "passed");
  EXPECT_EQ(g.result(1, 3), "ok");
  EXPECT_EQ(g.result(2, 3), "pending");
}

TEST(CoordinatorState, AnAckOfAVersionNeverOfferedIsIgnoredAndCommitsNothing) {
  Group g;
  g.join_all({1, 2, 3});
  g.publish(1);
  g.state.take_events();
  EXPECT_TRUE(g.send(2, ack(2, 5)).empty());
  EXPECT_TRUE(g.send(3, ack(3, 5)).empty());
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kIgnored, 2));
  EXPECT_FALSE(g.state.committed().has_value());
  EXPECT_EQ(g.result(1, 2), "pending");
  // The real acks still commit version 1.
  g.send(2, ack(2, 1));
  EXPECT_EQ(peers(g.send(3, ack(3, 1)), Body::kCommit), (Peers{"pub", "sub2", "sub3"}));
  EXPECT_EQ(g.state.committed(), 1u);
}

TEST(CoordinatorState, AnAckMissingATensorOrWithAnotherCountIsAMismatch) {
  for (const char* checksums :
       {"checksums { name: 'a' checksum: 100 }",
        "checksums { name: 'a' checksum: 100 } checksums { name: 'c' checksum: 101 }",
        "checksums { name: 'a' checksum: 100 } checksums { name: 'b' checksum: 101 } "
        "checksums { name: 'c' checksum: 1 }"}) {
    SCOPED_TRACE(checksums);
    Group g;
    g.offer_acked_by_sub3();
    const auto out = g.send(2, msg(2, std::string("ack { version: 1 ") + checksums + " }"));
    EXPECT_EQ(g.result(1, 2), "mismatch");
    EXPECT_EQ(g.member_state(2), "catch_up");
    EXPECT_EQ(peers(out, Body::kRecover), Peers{"sub2"});
  }
}

TEST(CoordinatorState, OfferCommitsAtOnceWithoutALiveSubscriber) {
  Group g;
  g.join(1);
  const auto out = g.publish(1);
  EXPECT_TRUE(peers(out, Body::kOffer).empty());
  EXPECT_EQ(peers(out, Body::kCommit), Peers{"pub"});
  EXPECT_EQ(g.state.committed(), 1u);
}

TEST(CoordinatorState, WrongChecksumSendsTheSubscriberToCatchUp) {
  Group g;
  g.offer_acked_by_sub3();
  const auto out = g.send(2, ack(2, 1, 7));
  expect_recover(out, "sub2", 1, true, "tensor 'b'");
  EXPECT_EQ(g.member_state(2), "catch_up");
  EXPECT_EQ(g.result(1, 2), "mismatch");
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kMovedToCatchUp, 2));
  // Sub3 acked already: the version commits without sub2.
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub2", "sub3"}));
  EXPECT_EQ(g.state.committed(), 1u);
}

TEST(CoordinatorState, NackSendsTheSubscriberToRecoverThroughTheJournal) {
  Group g;
  g.offer_acked_by_sub3();
  const auto out = g.send(2, msg(2, "nack { version: 1 reason: 'disk full' }"));
  // From the version it holds (its reader falls back to an anchor when that fails).
  expect_recover(out, "sub2", 1, false, "disk full");
  EXPECT_EQ(g.result(1, 2), "nack");
  EXPECT_EQ(g.member_state(2), "catch_up");
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub2", "sub3"}));
  EXPECT_EQ(g.state.committed(), 1u);
}

TEST(CoordinatorState, CatchUpSubscriberAckingTheHeadIsLiveAgain) {
  Group g;
  g.state.restore_head(5, 5, checksums_of(5), g.now);
  g.join(1);
  g.join(2, 3);
  g.send(2, ack(2, 4));  // on its way to the head
  EXPECT_EQ(g.member_state(2), "catch_up");
  g.state.take_events();
  g.send(2, ack(2, 5));
  EXPECT_EQ(g.member_state(2), "live");
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kLive, 2));
  EXPECT_EQ(g.result(5, 2), "ok");
  // Live again: the next version waits for its ack.
  EXPECT_TRUE(peers(g.publish(6), Body::kCommit).empty());
  EXPECT_EQ(peers(g.send(2, ack(2, 6)), Body::kCommit), (Peers{"pub", "sub2"}));
}

TEST(CoordinatorState, AckTimeoutSendsTheSubscriberToCatchUp) {
  Group g;
  g.join_all({1, 2, 3});
  g.publish(1);
  g.publish(2);
  EXPECT_TRUE(g.send(3, ack(3, 2)).empty());
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(g.tick_after(900ms).empty());
    g.beat({1, 2, 3});
  }
  EXPECT_TRUE(g.tick_after(200ms).empty());  // exactly ack_timeout: not yet
  const auto out = g.tick_after(1ms);
  expect_recover(out, "sub2", 2, false, "no ack of version 1");
  EXPECT_EQ(g.member_state(2), "catch_up");
  EXPECT_EQ(g.result(1, 2), "catch_up");
  EXPECT_EQ(g.result(2, 2), "catch_up");  // it owes no ack of a later version either
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub2", "sub3"}));
  EXPECT_EQ(g.state.committed(), 2u);
  EXPECT_FALSE(g.subscriber_result(2, 3)->after_commit());  // the commit waited for it
  // Its ack still counts once it comes, marked as one the commit did not wait for.
  g.send(2, ack(2, 2));
  EXPECT_EQ(g.result(2, 2), "ok");
  EXPECT_TRUE(g.subscriber_result(2, 2)->after_commit());
}

TEST(CoordinatorState, SilentRankIsDroppedAndCommitProceeds) {
  Group g;
  g.offer_acked_by_sub3();
  g.now += 500ms;
  g.beat({1, 3});
  EXPECT_TRUE(g.tick_after(500ms).empty());  // exactly dead_after: not yet
  const auto out = g.tick_after(1ms);
  EXPECT_EQ(g.member_state(2), "dead");
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kDropped, 2));
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub3"}));
  EXPECT_EQ(g.state.committed(), 1u);
  // Dropped, it must say Hello again.
  EXPECT_FALSE(only(g.send(2, msg(2, "heartbeat {}")), Body::kRefuse).refuse().fatal());
}

TEST(CoordinatorState, LeaveMarksTheMemberLeftAndCommitProceeds) {
  Group g;
  g.offer_acked_by_sub3();
  const auto out = g.send(2, msg(2, "leave { reason: 'bye' }"));
  EXPECT_EQ(g.member_state(2), "left");
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kLeft, 2));
  EXPECT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub3"}));
  EXPECT_EQ(g.state.committed(), 1u);
}

TEST(CoordinatorState, RestoredHeadCommitsWhenASubscriberHoldsIt) {
  Group g;
  g.state.restore_head(7, 5, checksums_of(7), g.now);
  EXPECT_FALSE(g.state.committed().has_value());
  const auto out = g.join(2, 7);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].message.welcome().plan(), "live");
  EXPECT_EQ(out[1].peer, "sub2");
  EXPECT_EQ(out[1].message.commit().version(), 7u);
  EXPECT_EQ(g.state.committed(), 7u);
  g.join(1);
  g.state.take_events();
  EXPECT_TRUE(g.publish(7).empty());  // a re-offer of the head is ignored
  EXPECT_TRUE(has_event(g.state.take_events(), Kind::kIgnored, 0));
}

TEST(CoordinatorState, RestartedSubscriberReplacesItsOldPeer) {
  Group g;
  g.join_all({1, 2, 3});
  g.publish(1);
  EXPECT_EQ(g.result(1, 2), "pending");
  const auto out = g.state.on_message("sub2-new", hello(2, proto::ROLE_SUBSCRIBER), g.now);
  EXPECT_EQ(peers(out, Body::kWelcome), Peers{"sub2-new"});
  EXPECT_EQ(only(out, Body::kWelcome).welcome().plan(), "catch_up");
  EXPECT_EQ(g.result(1, 2), "catch_up");
  EXPECT_EQ(g.result(1, 3), "pending");
  EXPECT_FALSE(only(g.send(2, msg(2, "heartbeat {}")), Body::kRefuse).refuse().fatal());
  EXPECT_EQ(peers(g.publish(2), Body::kOffer), (Peers{"sub2-new", "sub3"}));
  EXPECT_EQ(g.result(2, 2), "catch_up");
  EXPECT_EQ(peers(g.send(3, ack(3, 2)), Body::kCommit), (Peers{"pub", "sub2-new", "sub3"}));
}

TEST(CoordinatorState, PublishToCommitAddsThePublishersTimeToTheAckWait) {
  Group g;
  g.join_all({1, 2});
  g.publish(1, 1500);
  g.now += 250ms;
  const auto out = g.send(2, ack(2, 1));
  ASSERT_EQ(peers(out, Body::kCommit), (Peers{"pub", "sub2"}));
  EXPECT_EQ(out[0].message.commit().publish_to_commit_us(), 1500u + 250000u);
  EXPECT_EQ(g.state.status(g.now).versions(0).publish_to_commit_us(), 1500u + 250000u);
}

TEST(CoordinatorState, StatusKeepsAtMostVersionsKept) {
  CoordinatorSettings s = test_settings();
  s.versions_kept = 3;
  Group g(s);
  g.join(1);
  for (uint64_t v = 1; v <= 10; ++v) g.publish(v);
  const proto::StatusReply status = g.state.status(g.now);
  ASSERT_EQ(status.versions_size(), 3);
  EXPECT_EQ(status.versions(0).version(), 8u);
  EXPECT_EQ(status.versions(2).version(), 10u);
}

TEST(CoordinatorState, UncommittedVersionsAreKeptToCheckTheirAcks) {
  CoordinatorSettings s = test_settings();
  s.versions_kept = 2;
  Group g(s);
  g.join_all({1, 2});
  for (uint64_t v = 1; v <= 3; ++v) g.publish(v);
  EXPECT_EQ(g.state.status(g.now).versions_size(), 3);
  expect_recover(g.send(2, ack(2, 1, 7)), "sub2", 3, true, "tensor 'b' does not match");
  EXPECT_EQ(g.result(1, 2), "mismatch");
  EXPECT_EQ(g.state.committed(), 3u);  // no live subscriber is left to wait for
}

}  // namespace
}  // namespace weightcast::coordinator_test
