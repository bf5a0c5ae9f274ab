// The coordinator's NCCL epochs (coordinator_state.h, nccl_epochs.h) driven by hand:
// which ranks are asked to make the group id and to join, when offers reach subscribers marked
// with the epoch, and every way an epoch ends (a leave, a silent member, a restart, a failed
// report, a formation past its deadline) with its members told to abort.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "src/control/group_status.h"
#include "tests/control/coordinator_state_harness.h"

namespace weightcast::coordinator_test {
namespace {

using namespace std::chrono_literals;

CoordinatorSettings nccl_settings() {
  CoordinatorSettings s = test_settings();
  s.transports = {"nccl", "fs"};
  s.nccl = true;
  s.nccl_timeout = 3000ms;
  return s;
}

std::vector<OutgoingMessage> join_nccl(Group& g, uint32_t rank) {
  return g.send(rank, hello(rank, rank == 1 ? proto::ROLE_PUBLISHER : proto::ROLE_SUBSCRIBER,
                            "transports: ['nccl', 'fs']"));
}

proto::Envelope report(uint32_t rank, uint64_t epoch, proto::NcclStage stage, bool ok,
                       const std::string& extra = "") {
  return msg(rank, "nccl_report { epoch: " + std::to_string(epoch) +
                       " stage: " + proto::NcclStage_Name(stage) +
                       " ok: " + (ok ? "true" : "false") + " " + extra + " }");
}

// The stage of every nccl_epoch message in `out`, by peer.
std::vector<std::pair<std::string, proto::NcclStage>> stages(
    const std::vector<OutgoingMessage>& out) {
  std::vector<std::pair<std::string, proto::NcclStage>> s;
  for (const auto& m : out) {
    if (m.message.has_nccl_epoch()) s.emplace_back(m.peer, m.message.nccl_epoch().stage());
  }
  return s;
}

// Publisher 1 and subscribers 2, 3 over NCCL; epoch 1 formed while version 1 was offered.
struct NcclGroup : Group {
  NcclGroup() : Group(nccl_settings()) {
    for (uint32_t r : {1u, 2u, 3u}) join_nccl(*this, r);
  }
  std::vector<OutgoingMessage> publish_in(uint64_t v, uint64_t epoch) {
    proto::Envelope e = msg(1, "offer {}");
    e.mutable_offer()->set_version(v);
    if (epoch != 0) {
      (*e.mutable_offer()->mutable_live_descriptors())[std::string(kNcclPath)] =
          nccl_descriptor(epoch);
    }
    for (const auto& c : checksums_of(v)) *e.mutable_offer()->add_checksums() = c;
    return send(1, e);
  }
  void form_epoch(uint64_t v, uint64_t epoch) {
    auto out = publish_in(v, 0);
    ASSERT_EQ(peers(out, Body::kNcclEpoch), Peers{"pub"});
    const proto::NcclEpoch make = only(out, Body::kNcclEpoch).nccl_epoch();
    EXPECT_EQ(make.stage(), proto::NCCL_MAKE_ID);
    EXPECT_EQ(make.epoch(), epoch);
    auto joins = send(1, report(1, epoch, proto::NCCL_MAKE_ID, true, "group_id: 'ID'"));
    ASSERT_EQ(peers(joins, Body::kNcclEpoch), (Peers{"pub", "sub2", "sub3"}));
    for (const auto& j : joins) {
      EXPECT_EQ(j.message.nccl_epoch().stage(), proto::NCCL_JOIN);
      EXPECT_EQ(j.message.nccl_epoch().group_id(), "ID");
    }
    EXPECT_TRUE(send(1, report(1, epoch, proto::NCCL_JOIN, true)).empty());
    EXPECT_TRUE(send(2, report(2, epoch, proto::NCCL_JOIN, true)).empty());
    auto ready = send(3, report(3, epoch, proto::NCCL_JOIN, true));
    EXPECT_EQ(
        stages(ready),
        (std::vector<std::pair<std::string, proto::NcclStage>>{
            {"pub", proto::NCCL_READY}, {"sub2", proto::NCCL_READY}, {"sub3", proto::NCCL_READY}}));
    ASSERT_NE(state.nccl_epoch(), nullptr);
    EXPECT_TRUE(state.nccl_epoch()->ready);
  }
};

uint64_t offered_epoch(const std::vector<OutgoingMessage>& out, const std::string& peer) {
  for (const auto& m : out) {
    if (m.peer != peer || !m.message.has_offer()) continue;
    const auto& d = m.message.offer().live_descriptors();
    auto it = d.find(std::string(kNcclPath));
    return it == d.end() ? 0 : nccl_descriptor_epoch(it->second).value_or(99);
  }
  ADD_FAILURE() << "no offer to " << peer;
  return 99;
}

TEST(CoordinatorNccl, TheWelcomeListsNcclThenTheJournal) {
  NcclGroup g;
  const proto::Welcome w = only(join_nccl(g, 4), Body::kWelcome).welcome();
  EXPECT_EQ(std::vector<std::string>(w.transports().begin(), w.transports().end()),
            (std::vector<std::string>{"nccl", "fs"}));
}

TEST(CoordinatorNccl, ARankWhoseConfigPutsTheJournalFirstIsNoMember) {
  CoordinatorSettings s = nccl_settings();
  s.transports = {"fs", "nccl"};
  Group g(s);
  for (uint32_t r : {1u, 2u}) join_nccl(g, r);
  EXPECT_TRUE(stages(g.publish(1)).empty()) << "no member uses nccl: no epoch forms";
}

TEST(CoordinatorNccl, AnEpochFormsAtTheFirstOfferAndOnlyLaterOffersRideOnIt) {
  NcclGroup g;
  auto first = g.publish_in(1, 0);
  EXPECT_EQ(offered_epoch(first, "sub2"), 0u) << "the version that starts an epoch goes by fs";
  EXPECT_EQ(stages(first),
            (std::vector<std::pair<std::string, proto::NcclStage>>{{"pub", proto::NCCL_MAKE_ID}}));
  const proto::NcclEpoch make = only(first, Body::kNcclEpoch).nccl_epoch();
  EXPECT_EQ(std::vector<uint32_t>(make.ranks().begin(), make.ranks().end()),
            (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(make.publishers(), 1u);

  // A subscriber may not make the id; a report of another epoch is stale.
  EXPECT_TRUE(g.send(2, report(2, 1, proto::NCCL_MAKE_ID, true, "group_id: 'X'")).empty());
  EXPECT_TRUE(g.send(1, report(1, 7, proto::NCCL_MAKE_ID, true, "group_id: 'X'")).empty());
  auto joins = g.send(1, report(1, 1, proto::NCCL_MAKE_ID, true, "group_id: 'ID'"));
  EXPECT_EQ(peers(joins, Body::kNcclEpoch), (Peers{"pub", "sub2", "sub3"}));

  // While it forms, offers marked by the publisher reach nobody marked.
  EXPECT_EQ(offered_epoch(g.publish_in(2, 1), "sub3"), 0u);
  EXPECT_TRUE(g.send(1, report(1, 1, proto::NCCL_JOIN, true)).empty());
  EXPECT_TRUE(g.send(2, report(2, 1, proto::NCCL_JOIN, true)).empty());
  auto ready = g.send(3, report(3, 1, proto::NCCL_JOIN, true));
  EXPECT_EQ(peers(ready, Body::kNcclEpoch), (Peers{"pub", "sub2", "sub3"}));

  auto third = g.publish_in(3, 1);
  EXPECT_EQ(offered_epoch(third, "sub2"), 1u);
  EXPECT_EQ(offered_epoch(third, "sub3"), 1u);
  EXPECT_TRUE(stages(third).empty()) << "nothing changed: no new epoch";
  EXPECT_EQ(offered_epoch(g.publish_in(4, 0), "sub2"), 0u) << "not broadcast by the publisher";
  EXPECT_EQ(offered_epoch(g.publish_in(5, 9), "sub2"), 0u) << "another epoch";
}

TEST(CoordinatorNccl, ALateEngineFallsBackUntilTheNextEpochIncludesIt) {
  NcclGroup g;
  g.form_epoch(1, 1);
  const auto welcome = join_nccl(g, 4);
  EXPECT_TRUE(stages(welcome).empty()) << "a join does not break the epoch in force";
  auto v2 = g.publish_in(2, 1);
  EXPECT_EQ(offered_epoch(v2, "sub2"), 0u) << "the epoch ended as the new one started";
  EXPECT_EQ(offered_epoch(v2, "sub4"), 0u);
  EXPECT_EQ(stages(v2),
            (std::vector<std::pair<std::string, proto::NcclStage>>{{"pub", proto::NCCL_END},
                                                                   {"sub2", proto::NCCL_END},
                                                                   {"sub3", proto::NCCL_END},
                                                                   {"pub", proto::NCCL_MAKE_ID}}));
  EXPECT_EQ(g.state.nccl_epoch()->epoch, 2u);
  EXPECT_EQ(g.state.nccl_epoch()->ranks, (std::vector<uint32_t>{1, 2, 3, 4}));
}

TEST(CoordinatorNccl, ALeaveOrASilentMemberEndsTheEpochAtOnce) {
  NcclGroup g;
  g.form_epoch(1, 1);
  auto left = g.send(3, msg(3, "leave { reason: 'bye' }"));
  EXPECT_EQ(stages(left), (std::vector<std::pair<std::string, proto::NcclStage>>{
                              {"pub", proto::NCCL_END}, {"sub2", proto::NCCL_END}}));
  EXPECT_EQ(g.state.nccl_epoch(), nullptr);
  EXPECT_EQ(offered_epoch(g.publish_in(2, 1), "sub2"), 0u);
  EXPECT_EQ(g.state.nccl_epoch()->epoch, 2u);
  EXPECT_EQ(g.state.nccl_epoch()->ranks, (std::vector<uint32_t>{1, 2}));

  // Sub2 goes silent while epoch 2 forms: the epoch ends and the publisher is told.
  g.now += 600ms;
  g.beat({1});
  auto dropped = g.tick_after(600ms);
  EXPECT_EQ(stages(dropped),
            (std::vector<std::pair<std::string, proto::NcclStage>>{{"pub", proto::NCCL_END}}));
  EXPECT_EQ(g.member_state(2), "dead");
}

TEST(CoordinatorNccl, AMemberSayingHelloAgainRestartedAndEndsTheEpoch) {
  NcclGroup g;
  g.form_epoch(1, 1);
  auto again = join_nccl(g, 2);
  EXPECT_EQ(again.front().message.body_case(), Body::kWelcome) << "the welcome goes first";
  EXPECT_EQ(stages(again),
            (std::vector<std::pair<std::string, proto::NcclStage>>{
                {"pub", proto::NCCL_END}, {"sub2", proto::NCCL_END}, {"sub3", proto::NCCL_END}}));
  for (const auto& m : again) {
    if (m.message.has_nccl_epoch()) {
      EXPECT_NE(m.message.nccl_epoch().reason().find("rank 2 said hello again"), std::string::npos);
    }
  }
}

TEST(CoordinatorNccl, AFailedRoundEndsTheEpochAndTheNextVersionRebuildsIt) {
  NcclGroup g;
  g.form_epoch(1, 1);
  auto failed = g.send(3, report(3, 1, proto::NCCL_ROUND, false,
                                 "version: 2 reason: 'bucket 3: deadline exceeded'"));
  ASSERT_EQ(stages(failed).size(), 3u);
  for (const auto& m : failed) {
    EXPECT_EQ(m.message.nccl_epoch().stage(), proto::NCCL_END);
    EXPECT_NE(m.message.nccl_epoch().reason().find(
                  "rank 3 failed nccl round of version 2: bucket 3: deadline exceeded"),
              std::string::npos)
        << m.message.nccl_epoch().reason();
  }
  auto next = g.publish_in(3, 1);
  EXPECT_EQ(offered_epoch(next, "sub3"), 0u);
  EXPECT_EQ(g.state.nccl_epoch()->epoch, 2u);
  EXPECT_EQ(g.state.nccl_epoch()->ranks, (std::vector<uint32_t>{1, 2, 3}))
      << "a failed round keeps every member";
}

TEST(CoordinatorNccl, RoundsFailingEpochAfterEpochSuspendNcclUntilARankJoins) {
  NcclGroup g;
  for (uint64_t epoch = 1; epoch <= NcclEpochs::kMaxFailedEpochs; ++epoch) {
    g.form_epoch(epoch, epoch);
    g.send(2, report(2, epoch, proto::NCCL_ROUND, false, "version: 1 reason: 'link down'"));
  }
  const auto events = g.state.take_events();
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const CoordinatorEvent& e) {
    return e.kind == Kind::kNccl && e.detail.find("no new epoch") != std::string::npos;
  }));
  EXPECT_TRUE(stages(g.publish_in(10, 0)).empty()) << "suspended: no make_id";
  EXPECT_EQ(g.state.nccl_epoch(), nullptr);
  join_nccl(g, 4);
  EXPECT_EQ(stages(g.publish_in(11, 0)).size(), 1u) << "a join ends the suspension";
}

TEST(CoordinatorNccl, ARankThatCannotJoinFallsBackUntilItsNextHello) {
  NcclGroup g;
  g.publish_in(1, 0);
  g.send(1, report(1, 1, proto::NCCL_MAKE_ID, true, "group_id: 'ID'"));
  auto failed = g.send(2, report(2, 1, proto::NCCL_JOIN, false, "reason: 'no GPU'"));
  EXPECT_EQ(stages(failed),
            (std::vector<std::pair<std::string, proto::NcclStage>>{
                {"pub", proto::NCCL_END}, {"sub2", proto::NCCL_END}, {"sub3", proto::NCCL_END}}));
  g.publish_in(2, 0);
  EXPECT_EQ(g.state.nccl_epoch()->ranks, (std::vector<uint32_t>{1, 3}));
}

TEST(CoordinatorNccl, AnEpochNotFormedInTimeEndsAndLeavesOutTheRanksThatDidNotJoin) {
  NcclGroup g;
  g.publish_in(1, 0);
  g.send(1, report(1, 1, proto::NCCL_MAKE_ID, true, "group_id: 'ID'"));
  g.send(1, report(1, 1, proto::NCCL_JOIN, true));
  g.send(2, report(2, 1, proto::NCCL_JOIN, true));
  g.now += 2500ms;
  g.beat({1, 2, 3});
  EXPECT_TRUE(stages(g.tick_after(400ms)).empty()) << "still within nccl_timeout";
  g.beat({1, 2, 3});
  auto late = g.tick_after(200ms);
  ASSERT_EQ(stages(late).size(), 3u);
  EXPECT_NE(late[0].message.nccl_epoch().reason().find("ranks 3 did not join"), std::string::npos)
      << late[0].message.nccl_epoch().reason();
  g.publish_in(2, 0);
  EXPECT_EQ(g.state.nccl_epoch()->ranks, (std::vector<uint32_t>{1, 2}));
}

TEST(CoordinatorNccl, StatusShowsTheEpochInForce) {
  NcclGroup g;
  EXPECT_EQ(g.state.status(g.now).nccl_epoch(), 0u);
  EXPECT_EQ(format_status(g.state.status(g.now)).find("nccl epoch"), std::string::npos);
  g.publish_in(1, 0);
  EXPECT_NE(format_status(g.state.status(g.now)).find("nccl epoch 1 (forming): ranks 1,2,3\n"),
            std::string::npos);
  g.send(1, report(1, 1, proto::NCCL_MAKE_ID, true, "group_id: 'ID'"));
  for (uint32_t r : {1u, 2u, 3u}) g.send(r, report(r, 1, proto::NCCL_JOIN, true));
  const proto::StatusReply s = g.state.status(g.now);
  EXPECT_TRUE(s.nccl_ready());
  EXPECT_NE(format_status(s).find("nccl epoch 1 (ready): ranks 1,2,3\n"), std::string::npos);
  EXPECT_EQ(status_to_json(s)["nccl"]["ranks"], nlohmann::json::array({1, 2, 3}));
}

TEST(CoordinatorNccl, WithoutNcclInTheConfigNothingForms) {
  Group g;  // transports: fs
  for (uint32_t r : {1u, 2u}) join_nccl(g, r);
  EXPECT_TRUE(stages(g.publish(1)).empty());
  EXPECT_EQ(g.state.nccl_epoch(), nullptr);
}

}  // namespace
}  // namespace weightcast::coordinator_test
