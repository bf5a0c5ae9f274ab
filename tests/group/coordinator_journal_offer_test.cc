// The coordinator's journal watch (src/control/coordinator.cc, poll_journal): versions that
// reach the journal while their publisher's offers never reach the coordinator (a cut link, a
// publisher that died between HEAD and its Offer) are offered from their MANIFESTs once the
// grace has passed, every one of them and in order, so none is skipped by the newest.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "tests/group/group_harness.h"
#include "tests/transport/journal_robustness_util.h"
#include "tests/transport/journal_test_model.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;

// Whether `status` lists `version` as committed.
bool committed(const proto::StatusReply& status, uint64_t version) {
  return std::any_of(
      status.versions().begin(), status.versions().end(),
      [&](const proto::VersionStatus& v) { return v.version() == version && v.committed(); });
}

TEST(CoordinatorJournalOffers, EveryVersionPublishedWithoutAnOfferIsOfferedInOrder) {
  GroupSpec spec;
  spec.subscribers = 0;
  spec.max_in_flight = 3;  // a publisher may be this many versions ahead of the last commit
  TestGroup g(spec);
  JournalTestModel model(11);
  auto writer = JournalWriter::open(robustness_options(g.journal()));
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  ASSERT_TRUE(publish_model_through(writer->get(), &model, 0).ok());

  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  std::optional<proto::StatusReply> s;
  ASSERT_TRUE(eventually(
      [&] { return (s = group_status(g.config())) && s->has_head() && s->head_version() == 0; },
      milliseconds(10000)));

  // Three versions reach the journal, no Offer reaches the coordinator.
  ASSERT_TRUE(publish_model_through(writer->get(), &model, 3).ok());
  ASSERT_TRUE(eventually(
      [&] {
        return (s = group_status(g.config())) && s->has_committed() && s->committed_version() == 3;
      },
      milliseconds(15000)))
      << (s ? format_status(*s) : "no status");
  for (uint64_t v = 1; v <= 3; ++v) {
    EXPECT_TRUE(committed(*s, v)) << "version " << v << " was skipped:\n" << format_status(*s);
  }
  EXPECT_EQ(bad_results(*s), "");
}

}  // namespace
}  // namespace weightcast::testing
