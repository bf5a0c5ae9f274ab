// Damaged journals (ARCHITECTURE.md §7 invariants 1 and 4): every corrupt, truncated, missing or
// lying file is refused with an error naming it, a reader falls back to an older anchor whenever
// one still reaches the target, and a reader never reports holding a version it did not
// verify. The journal under test holds versions 0..7 with anchors at 0, 3 and 6; anchors 3
// and 6 carry their own delta in delta/, so a fallback can replay across them.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <functional>
#include <memory>
#include <optional>

#include "codec/base/file_io.h"
#include "codec/delta_format.h"
#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/retention.h"
#include "transport/fs/step_commit.h"

namespace weightcast {
namespace {

using testing::contains;
using testing::JournalTestModel;

constexpr uint64_t kSeed = 99;
constexpr uint64_t kHead = 7;

class JournalCorruption : public ::testing::Test {
 protected:
  // The journal is published once (publishing fsyncs every file, slow on a disk) and
  // copied for each test to damage.
  static void SetUpTestSuite() {
    pristine_ = new testing::ScratchDir;
    JournalTestModel model(kSeed);
    auto writer = JournalWriter::open(testing::robustness_options(pristine_->path()));
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    ASSERT_TRUE(testing::publish_model_through(writer->get(), &model, kHead).ok());
  }
  static void TearDownTestSuite() {
    delete pristine_;
    pristine_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(testing::copy_tree(pristine_->path(), dir_.path()));
    for (const uint64_t a : {0, 3, 6}) {
      auto m = read_manifest_file(layout_.manifest(a));
      ASSERT_TRUE(m.ok() && m->kind() == proto::STEP_ANCHOR) << "version " << a;
    }
    auto delta5 = read_manifest_file(layout_.manifest(5));
    ASSERT_TRUE(delta5.ok());
    ASSERT_GE(delta5->parts_size(), 2) << "the delta should span several parts";
  }

  struct Reader {
    std::vector<std::vector<uint8_t>> storage;
    std::unique_ptr<CatchUpReader> reader;
  };
  // A reader holding `version` (nothing when nullopt).
  std::unique_ptr<Reader> reader_at(std::optional<uint64_t> version) {
    auto r = std::make_unique<Reader>();
    JournalTestModel model(kSeed);
    r->reader = std::make_unique<CatchUpReader>(dir_.path(), model.destinations(&r->storage));
    if (version) {
      auto report = r->reader->catch_up(*version);
      EXPECT_TRUE(report.ok()) << report.status().to_string();
    }
    return r;
  }

  // Where part or shard `part` of a step lies, as its (still readable) manifest says.
  std::string part_path(uint64_t version, int part) {
    auto m = read_manifest_file(layout_.manifest(version));
    EXPECT_TRUE(m.ok() && part < m->parts_size()) << m.status().to_string();
    return m.ok() && part < m->parts_size() ? layout_.step(version) + "/" + m->parts(part).file()
                                            : std::string("(no such part)");
  }

  // After damage to delta 5 (naming `culprit`): a fresh reader cannot reach 5 and says why
  // with `code`, holding the last verified version on its way (4: a step is all or nothing);
  // a reader at 4 falls back to anchor 6 and reaches HEAD.
  void expect_delta5_refused_and_bypassed(const std::string& culprit, StatusCode code) {
    auto fresh = reader_at(std::nullopt);
    auto failed = fresh->reader->catch_up(5);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), code) << failed.status().to_string();
    EXPECT_TRUE(contains(failed.status().message(), culprit)) << failed.status().to_string();
    EXPECT_EQ(fresh->reader->held(), std::optional<uint64_t>(4));
    EXPECT_EQ(testing::held_mismatch(*fresh->reader, fresh->storage, kSeed), "");

    auto at4 = reader_at(4);
    auto report = at4->reader->catch_up();
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    ASSERT_FALSE(report->fallbacks.empty());
    EXPECT_TRUE(contains(report->fallbacks.front(), culprit)) << report->fallbacks.front();
    EXPECT_EQ(report->anchors_loaded, 1u);  // anchor 6, then delta 7
    EXPECT_EQ(report->deltas_applied, 1u);
    EXPECT_EQ(at4->reader->held(), std::optional<uint64_t>(kHead));
    EXPECT_EQ(testing::held_mismatch(*at4->reader, at4->storage, kSeed), "");
  }

  // After damage to anchor 6's shard `culprit`: a fresh reader falls back to anchor 3 and
  // replays 4, 5, 6 (from 6's delta/) and 7. With anchors 3 and 0 damaged too, nothing
  // reaches HEAD and the error names every anchor tried.
  void expect_anchor6_bypassed(const std::string& culprit, StatusCode code,
                               const std::function<void(const std::string&)>& damage) {
    auto fresh = reader_at(std::nullopt);
    auto report = fresh->reader->catch_up();
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    ASSERT_EQ(report->fallbacks.size(), 1u);
    EXPECT_TRUE(contains(report->fallbacks[0], "anchor 6")) << report->fallbacks[0];
    EXPECT_TRUE(contains(report->fallbacks[0], culprit)) << report->fallbacks[0];
    EXPECT_EQ(report->anchors_loaded, 1u);
    EXPECT_EQ(report->deltas_applied, 4u);
    EXPECT_EQ(testing::held_mismatch(*fresh->reader, fresh->storage, kSeed), "");

    damage(part_path(3, 0));
    damage(part_path(0, 0));
    auto none = reader_at(std::nullopt);
    auto failed = none->reader->catch_up();
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), code) << failed.status().to_string();
    for (const uint64_t a : {0, 3, 6}) {
      EXPECT_TRUE(contains(failed.status().message(), part_path(a, 0)))
          << failed.status().to_string();
    }
    EXPECT_FALSE(none->reader->held().has_value());
  }

  static testing::ScratchDir* pristine_;
  testing::ScratchDir dir_;
  JournalLayout layout_{dir_.path()};
};

testing::ScratchDir* JournalCorruption::pristine_ = nullptr;

TEST_F(JournalCorruption, FlippedDeltaPartByte) {
  const std::string part = part_path(5, 0);
  ASSERT_TRUE(testing::flip_byte(part, testing::file_size(part) / 2));
  expect_delta5_refused_and_bypassed(part, StatusCode::kDataLoss);
}

TEST_F(JournalCorruption, TruncatedDeltaPart) {
  const std::string part = part_path(5, 1);
  ASSERT_TRUE(testing::truncate_to(part, testing::file_size(part) / 2));
  expect_delta5_refused_and_bypassed(part, StatusCode::kDataLoss);
}

TEST_F(JournalCorruption, MissingDeltaPart) {
  const std::string part = part_path(5, 0);
  ASSERT_EQ(::unlink(part.c_str()), 0);
  expect_delta5_refused_and_bypassed(part, StatusCode::kNotFound);
}

TEST_F(JournalCorruption, FlippedAnchorShardByte) {
  auto flip = [](const std::string& shard) {
    ASSERT_TRUE(testing::flip_byte(shard, testing::file_size(shard) - 3));
  };
  flip(part_path(6, 0));
  expect_anchor6_bypassed(part_path(6, 0), StatusCode::kDataLoss, flip);
}

TEST_F(JournalCorruption, TruncatedAnchorShard) {
  auto cut = [](const std::string& shard) {
    ASSERT_TRUE(testing::truncate_to(shard, testing::file_size(shard) - 100));
  };
  cut(part_path(6, 0));
  expect_anchor6_bypassed(part_path(6, 0), StatusCode::kDataLoss, cut);
}

TEST_F(JournalCorruption, ManifestLyingAboutPartBytesIsRefusedNamingIt) {
  const std::string path = layout_.manifest(5);
  auto m = read_manifest_file(path);
  ASSERT_TRUE(m.ok());
  m->mutable_parts(0)->set_bytes(m->parts(0).bytes() + 1);  // raw_bytes left as it was
  ASSERT_TRUE(write_journal_file(path, JournalFileKind::kManifest, *m).ok());
  auto reread = read_manifest_file(path);
  ASSERT_FALSE(reread.ok());
  EXPECT_EQ(reread.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(reread.status().message(), path)) << reread.status().to_string();
  expect_delta5_refused_and_bypassed(path, StatusCode::kDataLoss);
}

TEST_F(JournalCorruption, ManifestPlacingATensorOutsideItsPartIsRefusedNamingIt) {
  const std::string path = layout_.manifest(5);
  auto m = read_manifest_file(path);
  ASSERT_TRUE(m.ok());
  proto::TensorState* t = m->mutable_tensors(0);
  ASSERT_TRUE(t->changed());
  t->set_offset(m->parts(static_cast<int>(t->part())).raw_bytes());
  ASSERT_TRUE(write_journal_file(path, JournalFileKind::kManifest, *m).ok());
  auto reread = read_manifest_file(path);
  ASSERT_FALSE(reread.ok());
  EXPECT_EQ(reread.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(reread.status().message(), "outside its part"))
      << reread.status().to_string();
  expect_delta5_refused_and_bypassed(path, StatusCode::kDataLoss);
}

TEST_F(JournalCorruption, ConsistentManifestLyingAboutTheFileSizeIsCaughtAtTheFile) {
  // bytes and raw_bytes agree, so the manifest parses; the part file itself disagrees.
  const std::string path = layout_.manifest(5);
  auto m = read_manifest_file(path);
  ASSERT_TRUE(m.ok());
  m->mutable_parts(1)->set_bytes(m->parts(1).bytes() + 8);
  m->mutable_parts(1)->set_raw_bytes(m->parts(1).raw_bytes() + 8);
  ASSERT_TRUE(write_journal_file(path, JournalFileKind::kManifest, *m).ok());
  expect_delta5_refused_and_bypassed(part_path(5, 1), StatusCode::kDataLoss);
}

TEST_F(JournalCorruption, HeadNamingAMissingStepIsNamed) {
  ASSERT_TRUE(remove_tree(layout_.step(kHead)).ok());
  auto fresh = reader_at(std::nullopt);
  auto failed = fresh->reader->catch_up();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kNotFound) << failed.status().to_string();
  EXPECT_TRUE(contains(failed.status().message(), layout_.step(kHead)))
      << failed.status().to_string();
  EXPECT_EQ(testing::held_mismatch(*fresh->reader, fresh->storage, kSeed), "");
  // The writer refuses to continue from a HEAD it cannot read back either.
  auto writer = JournalWriter::open(testing::robustness_options(dir_.path()));
  ASSERT_FALSE(writer.ok());
  EXPECT_TRUE(contains(writer.status().message(), layout_.step(kHead)))
      << writer.status().to_string();
}

TEST_F(JournalCorruption, CorruptHeadIsNamedAndChangesNothing) {
  auto at7 = reader_at(kHead);
  for (const bool torn : {false, true}) {
    SCOPED_TRACE(torn ? "torn HEAD" : "flipped byte in HEAD");
    if (torn) {
      ASSERT_TRUE(testing::truncate_to(layout_.head(), 5));
    } else {
      ASSERT_TRUE(testing::flip_byte(layout_.head(), 9));
    }
    auto r = at7->reader->catch_up();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(contains(r.status().message(), layout_.head())) << r.status().to_string();
    // The reader keeps the version it verified.
    EXPECT_EQ(at7->reader->held(), std::optional<uint64_t>(kHead));
    EXPECT_EQ(testing::held_mismatch(*at7->reader, at7->storage, kSeed), "");
    auto writer = JournalWriter::open(testing::robustness_options(dir_.path()));
    ASSERT_FALSE(writer.ok());
    EXPECT_TRUE(contains(writer.status().message(), layout_.head()));
    auto gc = collect_garbage(layout_, RetentionPolicy{1}, unix_now_ms());
    ASSERT_FALSE(gc.ok());
    EXPECT_EQ(layout_.list_steps()->size(), kHead + 1) << "GC must not act on a corrupt HEAD";
  }
}

// A delta whose record and manifest agree on a target checksum the changes do not produce:
// apply fails after earlier tensors of the step were already written, so the destinations
// are between versions, and the reader must not claim any version.
// A version is all or nothing: the tensors applied before the one that fails are reverted.
TEST_F(JournalCorruption, FailedDeltaApplyRevertsTheTensorsAlreadyApplied) {
  const std::string manifest_path = layout_.manifest(5);
  auto m = read_manifest_file(manifest_path);
  ASSERT_TRUE(m.ok());
  const int victim = 4;  // quant.codes: tensors 0..3 are applied before it
  proto::TensorState* t = m->mutable_tensors(victim);
  ASSERT_TRUE(t->changed() && t->name() == "quant.codes");
  const std::string part = layout_.step(5) + "/" + m->parts(static_cast<int>(t->part())).file();
  auto bytes = read_whole_file(part);
  ASSERT_TRUE(bytes.ok());
  std::span<uint8_t> slot(bytes->data() + t->offset(), t->bytes());
  auto view = parse_delta_record(slot);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  DeltaRecordHeader forged = view->header;
  forged.target_checksum ^= 0x5a5a;
  std::vector<std::vector<uint8_t>> chunks;
  for (const auto& c : view->chunks) chunks.emplace_back(c.begin(), c.end());
  const std::vector<uint8_t> record = assemble_delta_record(forged, chunks);
  ASSERT_EQ(record.size(), slot.size());
  std::copy(record.begin(), record.end(), slot.begin());
  ASSERT_TRUE(remove_tree(part).ok());
  ASSERT_TRUE(write_and_sync_file(part, *bytes, {}).ok());
  t->set_checksum(forged.target_checksum);
  m->mutable_parts(static_cast<int>(t->part()))
      ->set_xxh3(XXH3_64bits(bytes->data(), bytes->size()));
  ASSERT_TRUE(write_journal_file(manifest_path, JournalFileKind::kManifest, *m).ok());

  auto at4 = reader_at(4);
  auto failed = at4->reader->catch_up(5);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kChecksumMismatch) << failed.status().to_string();
  EXPECT_TRUE(contains(failed.status().message(), "quant.codes")) << failed.status().to_string();
  EXPECT_TRUE(contains(failed.status().message(), "were reverted")) << failed.status().to_string();
  // Every tensor holds version 4 again, byte for byte, and the reader says so.
  EXPECT_EQ(at4->reader->held(), std::optional<uint64_t>(4));
  JournalTestModel v4(kSeed);
  v4.advance_to(4);
  for (size_t i = 0; i < at4->storage.size(); ++i) {
    EXPECT_EQ(at4->storage[i], v4.bytes(i)) << "tensor " << i;
  }
  EXPECT_EQ(testing::held_mismatch(*at4->reader, at4->storage, kSeed), "");

  // HEAD is still reachable around the forged step, through anchor 6.
  auto report = at4->reader->catch_up();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(at4->reader->held(), std::optional<uint64_t>(kHead));
  EXPECT_EQ(testing::held_mismatch(*at4->reader, at4->storage, kSeed), "");
}

}  // namespace
}  // namespace weightcast
