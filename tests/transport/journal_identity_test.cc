// A journal knows it is not empty without HEAD, and knows itself: a new journal gets an
// identity and an empty HEAD; a missing HEAD beside steps is refused (never a fresh start
// reusing version numbers); a reader holding a version of a journal that was wiped and made
// anew, or a version above a HEAD that went back, reloads from an anchor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/step_commit.h"

namespace weightcast::testing {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

Result<std::unique_ptr<JournalWriter>> open_writer(const std::string& root) {
  return JournalWriter::open(robustness_options(root));
}

TEST(JournalIdentity, ANewJournalHasAnEmptyHeadAndAnIdentity) {
  ScratchDir dir;
  const JournalLayout layout(dir / "j");
  auto writer = open_writer(layout.root());
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  auto raw = read_head_file(layout.head());
  ASSERT_TRUE(raw.ok()) << raw.status().to_string();
  EXPECT_TRUE(raw->empty());
  EXPECT_EQ(raw->journal_id().size(), 32u);
  EXPECT_TRUE(is_journal_id(raw->journal_id()));
  auto head = read_journal_head(layout);
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE(head->has_value());
  EXPECT_FALSE((*writer)->head().has_value());

  JournalTestModel model(5);
  ASSERT_TRUE(publish_model_through(writer->get(), &model, 2).ok());
  auto after = read_journal_head(layout);
  ASSERT_TRUE(after.ok() && after->has_value());
  EXPECT_EQ((*after)->journal_id(), raw->journal_id());  // kept by every commit
  auto manifest = read_manifest_file(layout.manifest(2));
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->journal_id(), raw->journal_id());

  // Two journals never share an identity.
  ScratchDir other;
  ASSERT_TRUE(open_writer(other / "j").ok());
  auto other_head = read_head_file(JournalLayout(other / "j").head());
  ASSERT_TRUE(other_head.ok());
  EXPECT_NE(other_head->journal_id(), raw->journal_id());
}

TEST(JournalIdentity, AMissingHeadBesideStepsIsRefusedAndNothingIsRemoved) {
  ScratchDir dir;
  const JournalLayout layout(dir / "j");
  {
    auto writer = open_writer(layout.root());
    ASSERT_TRUE(writer.ok());
    JournalTestModel model(5);
    ASSERT_TRUE(publish_model_through(writer->get(), &model, 4).ok());
  }
  ASSERT_EQ(::unlink(layout.head().c_str()), 0);
  auto before = layout.list_steps();
  ASSERT_TRUE(before.ok());
  ASSERT_FALSE(before->empty());

  auto writer = open_writer(layout.root());
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(writer.status().message(), "no HEAD")) << writer.status().to_string();
  EXPECT_TRUE(contains(writer.status().message(), "repair-head")) << writer.status().to_string();
  EXPECT_TRUE(contains(writer.status().message(), layout.root()));
  auto after = layout.list_steps();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);  // no step deleted, no version reused
  EXPECT_FALSE(std::filesystem::exists(layout.head()));

  // Readers refuse it the same way rather than seeing an empty journal.
  JournalTestModel shape(5);
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(layout.root(), shape.destinations(&storage));
  auto caught = reader.catch_up();
  ASSERT_FALSE(caught.ok());
  EXPECT_TRUE(contains(caught.status().message(), "repair-head"));
}

TEST(JournalIdentity, AFirstVersionCrashedBeforeHeadIsCleanedAsUncommitted) {
  ScratchDir dir;
  const JournalLayout layout(dir / "j");
  {
    JournalOptions o = robustness_options(layout.root());
    o.before_head = [] { throw std::runtime_error("crash before HEAD"); };
    auto writer = JournalWriter::open(o);
    ASSERT_TRUE(writer.ok());
    JournalTestModel model(5);
    EXPECT_THROW((void)publish_model_version(writer->get(), &model, 0), std::runtime_error);
  }
  ASSERT_TRUE(std::filesystem::exists(layout.step(0)));  // renamed, never named by HEAD
  auto writer = open_writer(layout.root());
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  EXPECT_FALSE((*writer)->head().has_value());
  EXPECT_FALSE(std::filesystem::exists(layout.step(0)));
}

// A reader at v3 of journal A; the root is wiped and journal B (another model) published.
TEST(JournalIdentity, AReaderOfAReplacedJournalReloadsFromAnAnchor) {
  ScratchDir dir;
  const std::string root = dir / "j";
  JournalTestModel a(5);
  {
    auto writer = open_writer(root);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(publish_model_through(writer->get(), &a, 5).ok());
  }
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(root, a.destinations(&storage));
  ASSERT_TRUE(reader.catch_up().ok());
  ASSERT_EQ(reader.held(), std::optional<uint64_t>(5));
  const std::string old_id = reader.held_journal_id();
  ASSERT_FALSE(old_id.empty());

  for (const uint64_t newer : {7u, 3u}) {  // a head above and below the held version
    ASSERT_TRUE(remove_tree(root).ok());
    JournalTestModel b(99);
    {
      auto writer = open_writer(root);
      ASSERT_TRUE(writer.ok());
      ASSERT_TRUE(publish_model_through(writer->get(), &b, newer).ok());
    }
    auto caught = reader.catch_up();
    ASSERT_TRUE(caught.ok()) << caught.status().to_string();
    EXPECT_EQ(reader.held(), std::optional<uint64_t>(newer));
    EXPECT_NE(reader.held_journal_id(), old_id);
    EXPECT_GE(caught->anchors_loaded, 1u);
    ASSERT_FALSE(caught->fallbacks.empty());
    EXPECT_TRUE(contains(caught->fallbacks.front(), "another journal"));
    EXPECT_EQ(held_mismatch(reader, storage, 99), "");
  }
}

TEST(JournalIdentity, AReaderAboveAHeadThatWentBackReloadsFromAnAnchor) {
  ScratchDir dir;
  const JournalLayout layout(dir / "j");
  JournalTestModel model(5);
  auto writer = open_writer(layout.root());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(publish_model_through(writer->get(), &model, 5).ok());
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(layout.root(), model.destinations(&storage));
  ASSERT_TRUE(reader.catch_up().ok());
  ASSERT_EQ(reader.held(), std::optional<uint64_t>(5));
  // HEAD put back to v4 (as a repair to an older step does), same journal.
  auto head = read_head_file(layout.head());
  ASSERT_TRUE(head.ok());
  head->set_version(4);
  head->set_anchor_version(3);
  ASSERT_TRUE(write_head(layout, *head).ok());
  auto caught = reader.catch_up();
  ASSERT_TRUE(caught.ok()) << caught.status().to_string();
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(4));
  ASSERT_FALSE(caught->fallbacks.empty());
  EXPECT_TRUE(contains(caught->fallbacks.front(), "went back")) << caught->fallbacks.front();
  EXPECT_EQ(held_mismatch(reader, storage, 5), "");
}

TEST(JournalIdentity, ADeltaOfAnotherJournalIsRefusedBeforeAnyWrite) {
  ScratchDir dir;
  const std::string root = dir / "j";
  JournalTestModel model(5);
  auto writer = open_writer(root);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(publish_model_through(writer->get(), &model, 1).ok());
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(root, model.destinations(&storage));
  ASSERT_TRUE(reader.catch_up().ok());
  proto::StepManifest delta;
  delta.set_format_version(kJournalFormatVersion);
  delta.set_kind(proto::STEP_DELTA);
  delta.set_version(2);
  delta.set_base_version(1);
  delta.set_journal_id(std::string(32, 'a'));
  Status s = reader.apply_delta_from(delta, {}, "live delta");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "of journal")) << s.to_string();
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(1));
}

TEST(JournalIdentity, HeadAndManifestIdentitiesAreChecked) {
  proto::JournalHead head;
  head.set_journal_id("NOT-HEX");
  EXPECT_EQ(parse_head(frame_journal_message(JournalFileKind::kHead, head), "HEAD").status().code(),
            StatusCode::kDataLoss);
  head.set_journal_id(std::string(65, 'a'));
  EXPECT_FALSE(parse_head(frame_journal_message(JournalFileKind::kHead, head), "HEAD").ok());
  head.set_journal_id("");
  head.set_empty(true);
  head.set_version(3);
  EXPECT_FALSE(parse_head(frame_journal_message(JournalFileKind::kHead, head), "HEAD").ok());
  head.set_version(0);
  EXPECT_TRUE(parse_head(frame_journal_message(JournalFileKind::kHead, head), "HEAD").ok());
  proto::StepManifest m;
  m.set_format_version(kJournalFormatVersion);
  m.set_kind(proto::STEP_DELTA);
  m.set_version(2);
  m.set_base_version(1);
  m.set_journal_id("zz");
  EXPECT_EQ(check_manifest(m, "MANIFEST").code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace weightcast::testing
