// The figures the benches read from the coordinator's status (`weightcast bench group`): what a
// subscriber's ack reports (bytes written, peak RSS, engine bytes) lands in its result, what the
// publisher's offer reports (peak RSS, model bytes) in the version, and both in the JSON of
// `weightcast group status --json`; and a head read from the journal keeps its kind.
#include <gtest/gtest.h>

#include "src/control/group_status.h"
#include "tests/control/coordinator_state_harness.h"

namespace weightcast::coordinator_test {
namespace {

TEST(CoordinatorBenchFigures, AckAndOfferFiguresReachTheStatus) {
  Group g;
  g.join_all({1, 2, 3});
  proto::Envelope offer = msg(1, "offer { peak_rss_bytes: 5000 model_bytes: 4000 }");
  offer.mutable_offer()->set_version(1);
  for (const auto& c : checksums_of(1)) *offer.mutable_offer()->add_checksums() = c;
  g.send(1, offer);
  proto::Envelope a2 = ack(2, 1);
  a2.mutable_ack()->set_bytes_written(123);
  a2.mutable_ack()->set_peak_rss_bytes(9000);
  a2.mutable_ack()->set_engine_bytes(4000);
  a2.mutable_ack()->set_bytes_read(77);
  g.send(2, a2);
  g.send(3, ack(3, 1));  // reports none of them

  const proto::StatusReply s = g.state.status(g.now);
  ASSERT_EQ(s.versions_size(), 1);
  const proto::VersionStatus& v = s.versions(0);
  EXPECT_TRUE(v.committed());
  EXPECT_EQ(v.publisher_peak_rss_bytes(), 5000u);
  EXPECT_EQ(v.publisher_model_bytes(), 4000u);
  ASSERT_EQ(v.results_size(), 2);
  for (const auto& r : v.results()) {
    EXPECT_EQ(r.result(), "ok");
    EXPECT_EQ(r.bytes_written(), r.rank() == 2 ? 123u : 0u);
    EXPECT_EQ(r.peak_rss_bytes(), r.rank() == 2 ? 9000u : 0u);
    EXPECT_EQ(r.engine_bytes(), r.rank() == 2 ? 4000u : 0u);
    EXPECT_EQ(r.bytes_read(), r.rank() == 2 ? 77u : 0u);
  }

  const nlohmann::json j = status_to_json(s)["versions"][0];
  EXPECT_EQ(j["publisher_peak_rss_bytes"], 5000);
  EXPECT_EQ(j["publisher_model_bytes"], 4000);
  EXPECT_EQ(j["results"]["2"], "ok");
  ASSERT_EQ(j["subscribers"].size(), 2u);
  EXPECT_EQ(j["subscribers"][0]["rank"], 2);
  EXPECT_EQ(j["subscribers"][0]["bytes_written"], 123);
  EXPECT_EQ(j["subscribers"][0]["peak_rss_bytes"], 9000);
  EXPECT_EQ(j["subscribers"][0]["engine_bytes"], 4000);
  EXPECT_EQ(j["subscribers"][1]["bytes_written"], 0);
}

// The coordinator can read a version in HEAD before its publisher's offer arrives (the offer
// is then "already known"): the version still says whether it is an anchor.
TEST(CoordinatorBenchFigures, AHeadRestoredFromTheJournalKeepsItsKind) {
  Group anchored;
  anchored.state.restore_head(5, 5, checksums_of(5), anchored.now);
  EXPECT_TRUE(anchored.state.status(anchored.now).versions(0).anchor());
  Group delta;
  delta.state.restore_head(6, 5, checksums_of(6), delta.now);
  EXPECT_FALSE(delta.state.status(delta.now).versions(0).anchor());
}

}  // namespace
}  // namespace weightcast::coordinator_test
