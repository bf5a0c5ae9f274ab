// Retention of the journal (nothing acked is lost: every committed version can be rebuilt): what
// garbage collection keeps (the newest anchors and every step after the oldest kept one, HEAD and
// its anchor always, every step a live lease needs) and what it must never do (act without HEAD,
// trust an unreadable lease).
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>

#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/retention.h"
#include "transport/fs/step_commit.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;
using testing::ScratchDir;

constexpr uint64_t kSeed = 31337;
constexpr int64_t kHour = 3600 * 1000;

std::vector<uint64_t> range(uint64_t first, uint64_t last) {
  std::vector<uint64_t> v(last - first + 1);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class Retention : public ::testing::Test {
 protected:
  // Versions 0..14 published once without GC (publishing fsyncs every file, slow on a disk);
  // most tests start from a copy.
  static void SetUpTestSuite() {
    pristine_ = new ScratchDir;
    JournalOptions options = testing::robustness_options(pristine_->path(), 3, 1);
    options.collect_garbage_after_publish = false;
    auto writer = JournalWriter::open(options);
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    JournalTestModel model(kSeed);
    ASSERT_TRUE(testing::publish_model_through(writer->get(), &model, 14).ok());
  }
  static void TearDownTestSuite() {
    delete pristine_;
    pristine_ = nullptr;
  }
  // This test's journal becomes a copy of versions 0..14 (anchors 0, 3, 6, 9, 12).
  void start_from_pristine() {
    ASSERT_TRUE(testing::copy_tree(pristine_->path(), dir_.path()));
    model_.advance_to(14);
    ASSERT_EQ(steps(), range(0, 14));
  }
  // Publishes up to `last` with anchors every 3 versions (0, 3, 6, ...) and the given policy.
  void publish_through(uint64_t last, size_t keep_anchors) {
    JournalOptions options = testing::robustness_options(dir_.path(), 3, keep_anchors);
    auto writer = JournalWriter::open(options);
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    ASSERT_TRUE(testing::publish_model_through(writer->get(), &model_, last).ok());
  }
  std::vector<uint64_t> steps() const {
    auto s = layout_.list_steps();
    EXPECT_TRUE(s.ok());
    return s.ok() ? *s : std::vector<uint64_t>{};
  }

  static ScratchDir* pristine_;
  ScratchDir dir_;
  JournalLayout layout_{dir_.path()};
  JournalTestModel model_{kSeed};
};

ScratchDir* Retention::pristine_ = nullptr;

TEST_F(Retention, KeepsTheNewestAnchorsAndEverythingAfterTheOldestKept) {
  // The writer's own GC after every publication.
  publish_through(14, /*keep_anchors=*/2);  // anchors 0, 3, 6, 9, 12; HEAD 14
  EXPECT_EQ(steps(), range(9, 14));
  // And the journal still serves a fresh reader from it.
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(dir_.path(), model_.destinations(&storage));
  ASSERT_TRUE(reader.catch_up().ok());
  EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(14));
}

TEST_F(Retention, HeadAndItsAnchorAreNeverRemoved) {
  start_from_pristine();
  // keep_anchors 0 means 1: HEAD 14 keeps its anchor 12 and what follows.
  auto gc = collect_garbage(layout_, RetentionPolicy{0}, unix_now_ms());
  ASSERT_TRUE(gc.ok()) << gc.status().to_string();
  EXPECT_EQ(gc->keep_from, 12u);
  EXPECT_EQ(steps(), range(12, 14));
  // HEAD's anchor with an unreadable manifest is still not a candidate for removal.
  ASSERT_TRUE(testing::flip_byte(layout_.manifest(12), 10));
  gc = collect_garbage(layout_, RetentionPolicy{1}, unix_now_ms());
  ASSERT_TRUE(gc.ok()) << gc.status().to_string();
  EXPECT_EQ(steps(), range(12, 14));
}

TEST_F(Retention, HeadThatIsAnAnchorKeepsOnlyItself) {
  start_from_pristine();
  publish_through(15, 1);  // 15 is an anchor
  EXPECT_EQ(steps(), std::vector<uint64_t>{15});
  auto head = read_head_file(layout_.head());
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->anchor_version(), 15u);
}

TEST_F(Retention, LiveLeaseKeepsEveryStepFromItsVersion) {
  start_from_pristine();
  ASSERT_TRUE(write_lease(layout_, "engine-a", 1, unix_now_ms(), kHour).ok());
  publish_through(16, 2);  // the writer's GC: anchors 12 and 15 kept, and the lease on 1
  EXPECT_EQ(steps(), range(1, 16));
  auto leases = list_leases(layout_);
  ASSERT_TRUE(leases.ok());
  ASSERT_EQ(leases->size(), 1u);
  EXPECT_EQ((*leases)[0].holder(), "engine-a");
}

TEST_F(Retention, ExpiredLeaseIsRemovedAndStopsProtecting) {
  start_from_pristine();
  const int64_t now = unix_now_ms();
  ASSERT_TRUE(write_lease(layout_, "engine-b", 1, now, 1000).ok());
  auto gc = collect_garbage(layout_, RetentionPolicy{2}, now + 500);  // still live
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(steps(), range(1, 14));
  gc = collect_garbage(layout_, RetentionPolicy{2}, now + 2000);  // expired
  ASSERT_TRUE(gc.ok()) << gc.status().to_string();
  EXPECT_EQ(gc->expired_leases, std::vector<std::string>{"engine-b"});
  EXPECT_EQ(steps(), range(9, 14));
  EXPECT_FALSE(std::filesystem::exists(layout_.lease("engine-b")));
}

TEST_F(Retention, UnreadableLeaseKeepsEverything) {
  start_from_pristine();
  { std::ofstream(layout_.lease("broken"), std::ios::binary) << "not a lease"; }
  auto gc = collect_garbage(layout_, RetentionPolicy{1}, unix_now_ms());
  ASSERT_TRUE(gc.ok()) << gc.status().to_string();
  EXPECT_EQ(gc->keep_from, 0u);
  EXPECT_TRUE(gc->removed.empty());
  EXPECT_EQ(steps(), range(0, 14));
  // Once it is gone, retention resumes.
  ASSERT_TRUE(std::filesystem::remove(layout_.lease("broken")));
  gc = collect_garbage(layout_, RetentionPolicy{1}, unix_now_ms());
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(steps(), range(12, 14));
}

TEST_F(Retention, ReaderLeaseProtectsItsReplayAndIsReleased) {
  start_from_pristine();
  std::vector<std::vector<uint8_t>> storage;
  CatchUpOptions options;
  options.lease_holder = "engine-c";
  std::vector<uint64_t> leased;  // lease versions seen while replaying
  std::vector<uint64_t> removed;
  options.log = [&](const std::string& line) {
    auto leases = list_leases(layout_);
    ASSERT_TRUE(leases.ok());
    for (const auto& l : *leases) {
      if (l.holder() == "engine-c") leased.push_back(l.version());
    }
    // The most aggressive GC, in the middle of the replay: it must leave what is left to
    // replay (from the lease's version on).
    if (line == "applied delta 5") {
      auto gc = collect_garbage(layout_, RetentionPolicy{1}, unix_now_ms());
      ASSERT_TRUE(gc.ok()) << gc.status().to_string();
      removed = gc->removed;
    }
  };
  JournalTestModel shape(kSeed);
  CatchUpReader reader(dir_.path(), shape.destinations(&storage), options);
  ASSERT_TRUE(reader.catch_up(4).ok());  // anchor 3, delta 4
  auto report = reader.catch_up();       // deltas 5..14, from the held version
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(14));
  EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");
  EXPECT_FALSE(leased.empty());
  // The lease named 4, the version being replayed from, when GC ran after delta 5.
  EXPECT_EQ(removed, range(0, 3));
  EXPECT_EQ(steps(), range(4, 14));
  EXPECT_FALSE(std::filesystem::exists(layout_.lease("engine-c")));
  auto leases = list_leases(layout_);
  ASSERT_TRUE(leases.ok());
  EXPECT_TRUE(leases->empty());
}

// Deltas inside HEAD's anchor chain are never collected: a reader following the head there
// writes no lease file (two durable file operations saved per version).
TEST_F(Retention, AReaderFollowingTheHeadInsideItsAnchorChainWritesNoLease) {
  start_from_pristine();
  auto head = read_journal_head(layout_);
  ASSERT_TRUE(head.ok() && head->has_value());
  const uint64_t anchor = (*head)->anchor_version();
  ASSERT_LT(anchor + 1, (*head)->version()) << "the journal should end in deltas after an anchor";
  std::vector<std::vector<uint8_t>> storage;
  CatchUpOptions options;
  options.lease_holder = "engine-d";
  bool leased = false;
  options.log = [&](const std::string&) {
    leased = leased || std::filesystem::exists(layout_.lease("engine-d"));
  };
  JournalTestModel shape(kSeed);
  CatchUpReader reader(dir_.path(), shape.destinations(&storage), options);
  ASSERT_TRUE(reader.catch_up(anchor).ok());
  EXPECT_TRUE(leased) << "loading the anchor is protected by a lease";
  leased = false;
  auto report = reader.catch_up();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->deltas_applied, (*head)->version() - anchor);
  EXPECT_FALSE(leased);
  EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");
}

TEST_F(Retention, RootWithoutHeadIsLeftAlone) {
  for (const uint64_t v : {0, 1, 2}) ASSERT_TRUE(make_directories(layout_.step(v)).ok());
  ASSERT_TRUE(write_lease(layout_, "old", 0, 0, 1).ok());  // long expired
  // Steps without HEAD are a journal that lost its HEAD, not an empty one: refused, untouched.
  auto gc = collect_garbage(layout_, RetentionPolicy{1}, unix_now_ms());
  ASSERT_FALSE(gc.ok());
  EXPECT_EQ(gc.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(gc.status().message().find("repair-head"), std::string::npos);
  EXPECT_EQ(steps(), range(0, 2));
  EXPECT_TRUE(std::filesystem::exists(layout_.lease("old")));
}

}  // namespace
}  // namespace weightcast
