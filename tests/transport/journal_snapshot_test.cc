// Publishing with one copy of the model (JournalWriter::publish with a SnapshotAdvance,
// transport/fs/journal_writer.h): the snapshot equals each published version afterwards,
// whether the step was a delta, an anchor carrying its delta, or an anchor without one (the
// first version); current_read comes before an anchor's files are written, so the caller may
// scribble over its tensors then and the anchor still holds the version; the journal's steps
// are those of a publication with two copies; a wrong snapshot, or a before_commit check that
// fails, is refused, not published.
// Also the codec half: encode_delta_advancing's record equals encode_delta's.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/delta_encoder.h"
#include "tests/codec/test_data.h"
#include "tests/transport/journal_test_model.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;
using testing::ScratchDir;

JournalOptions options(const std::string& root) {
  JournalOptions o;
  o.root = root;
  o.anchor_every = 3;
  o.retention.keep_anchors = 10;
  o.delta.part_bytes = 512;
  o.anchor.shard_bytes = 8192;
  o.anchor.slice_bytes = 1024;
  return o;
}

TEST(EncodeAdvancing, TheRecordIsEncodeDeltasAndTheSnapshotBecomesTheNewBytes) {
  const auto old_bytes = testing::random_bytes(300000 * 2, 3);
  const auto new_bytes = testing::perturb(old_bytes, 2, 0.01, 4);
  ThreadPool pool(2);
  EncodeOptions o;
  o.name = "w";
  o.pool = &pool;
  auto plain = encode_delta(old_bytes, new_bytes, o);
  ASSERT_TRUE(plain.ok());
  std::vector<uint8_t> snapshot = old_bytes;
  auto advanced = encode_delta_advancing(snapshot, new_bytes, o);
  ASSERT_TRUE(advanced.ok()) << advanced.status().to_string();
  EXPECT_EQ(advanced->record, plain->record);
  EXPECT_EQ(snapshot, new_bytes);
}

// A publisher's state: the trainer's model, the snapshot, and what the trainer does once its
// tensors were read (overwrites them, as its next optimizer step would).
struct OneCopyPublisher {
  JournalTestModel model{31};
  std::vector<std::vector<uint8_t>> snapshot;
  bool have_previous = false;
  int reads = 0;
  std::function<Status()> before_commit;  // SnapshotAdvance::before_commit, when set

  Result<PublishReport> publish(JournalWriter* writer, uint64_t version, bool force_anchor) {
    model.advance_to(version);
    std::vector<PublishTensor> current = model.tensors();
    // The trainer's live tensors: a copy it will scribble over once they were read.
    std::vector<std::vector<uint8_t>> live;
    for (size_t i = 0; i < model.size(); ++i) live.push_back(model.bytes(i));
    for (size_t i = 0; i < current.size(); ++i) current[i].bytes = live[i];
    if (snapshot.empty()) {
      for (size_t i = 0; i < model.size(); ++i) snapshot.emplace_back(model.bytes(i).size());
    }
    std::vector<PublishTensor> previous;
    std::vector<std::span<uint8_t>> spans;
    for (size_t i = 0; i < current.size(); ++i) {
      spans.emplace_back(snapshot[i]);
      if (have_previous)
        previous.push_back({current[i].name, current[i].dtype, current[i].shape, snapshot[i]});
    }
    SnapshotAdvance advance;
    advance.snapshot = spans;
    advance.current_read = [&] {
      ++reads;
      for (auto& t : live) std::fill(t.begin(), t.end(), 0x5A);
    };
    advance.before_commit = before_commit;
    auto r = writer->publish(version, current, previous, force_anchor, &advance);
    have_previous = r.ok();
    return r;
  }
};

TEST(JournalSnapshot, TheSnapshotFollowsEveryKindOfStepAndReadersGetEveryVersion) {
  ScratchDir dir;
  auto writer = JournalWriter::open(options(dir.path()));
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  OneCopyPublisher p;
  // 0: first (anchor, no delta); 1, 2: deltas; 3: anchor every 3 (with its delta); 4: delta;
  // 5: a forced anchor.
  for (uint64_t v = 0; v <= 5; ++v) {
    auto r = p.publish(writer->get(), v, /*force_anchor=*/v == 5);
    ASSERT_TRUE(r.ok()) << "v" << v << ": " << r.status().to_string();
    EXPECT_EQ(r->anchor, v == 0 || v == 3 || v == 5) << "v" << v;
    EXPECT_EQ(p.reads, static_cast<int>(v + 1)) << "current_read once per version";
    for (size_t i = 0; i < p.model.size(); ++i) {
      ASSERT_EQ(p.snapshot[i], p.model.bytes(i)) << "v" << v << " tensor " << i;
    }
    // A fresh reader reaches v from the anchor, a follower by the delta: the journal holds
    // the versions, not the scribbles made after current_read.
    std::vector<std::vector<uint8_t>> storage;
    CatchUpReader fresh(dir.path(), p.model.destinations(&storage));
    auto report = fresh.catch_up(v);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    for (size_t i = 0; i < p.model.size(); ++i) {
      EXPECT_EQ(storage[i], p.model.bytes(i)) << "v" << v << " tensor " << i;
    }
  }
}

TEST(JournalSnapshot, ASnapshotThatIsNotTheHeadIsRefusedAndNothingIsPublished) {
  ScratchDir dir;
  auto writer = JournalWriter::open(options(dir.path()));
  ASSERT_TRUE(writer.ok());
  OneCopyPublisher p;
  ASSERT_TRUE(p.publish(writer->get(), 0, false).ok());
  p.snapshot[0][3] ^= 0x10;  // the snapshot no longer holds version 0
  auto r = p.publish(writer->get(), 1, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().to_string();
  EXPECT_NE(r.status().message().find(p.model.tensors()[0].name), std::string::npos)
      << r.status().to_string();
  EXPECT_EQ((*writer)->head()->version(), 0u);
}

// before_commit runs once the version's files, its manifest included, are staged (so that a
// guard beside the write overlaps their fsyncs); its error publishes nothing, leaves nothing
// staged, and the next version publishes.
TEST(JournalSnapshot, BeforeCommitSeesTheStagedManifestAndItsErrorPublishesNothing) {
  ScratchDir dir;
  auto writer = JournalWriter::open(options(dir.path()));
  ASSERT_TRUE(writer.ok());
  const JournalLayout layout(dir.path());
  OneCopyPublisher p;
  uint64_t version = 0;
  bool staged = false;
  Status verdict = ok_status();
  p.before_commit = [&] {
    staged = std::filesystem::exists(layout.staging() + "/" +
                                     JournalLayout::step_dir_name(version) + "/MANIFEST");
    return verdict;
  };
  ASSERT_TRUE(p.publish(writer->get(), version, false).ok());
  EXPECT_TRUE(staged) << "before_commit ran before the manifest was staged";
  staged = false;
  version = 1;
  verdict = failed_precondition("tensor 'w' changed outside the step");
  auto refused = p.publish(writer->get(), version, false);
  EXPECT_TRUE(staged);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("changed outside the step"), std::string::npos)
      << refused.status().to_string();
  EXPECT_EQ((*writer)->head()->version(), 0u);
  EXPECT_FALSE(std::filesystem::exists(layout.step(1))) << "the refused version was committed";
  EXPECT_TRUE(std::filesystem::is_empty(layout.staging())) << "the refused version stays staged";
  // The refused delta advanced the snapshot part way: the next version goes out as an anchor.
  version = 2;
  verdict = ok_status();
  auto next = p.publish(writer->get(), version, true);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_EQ((*writer)->head()->version(), 2u);
}

}  // namespace
}  // namespace weightcast
