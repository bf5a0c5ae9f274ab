// Several publisher ranks write one delta version of a journal (rank_fragments.h): four
// FSDP-like ranks own uneven flat ranges that cross tensor boundaries, each writes its
// fragment, the journal's writer commits the version once, and a reader holding whole tensors
// follows every version bit-exact. A rank that never finishes (or is SIGKILLed) leaves the
// version uncommitted, named; ranges that overlap, leave a hole, disagree on shape or start
// from another version are refused by name; a manifest whose ranges do not add up is refused.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <set>
#include <thread>

#include "codec/checksum.h"
#include "codec/delta_encoder.h"
#include "tests/transport/journal_ranks_util.h"
#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;
using testing::ScratchDir;

using testing::fsdp_split;
using testing::Owned;
using testing::write_fragment;

constexpr uint32_t kRanks = 4;
constexpr auto kWait = std::chrono::milliseconds(20000);

class JournalRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    JournalOptions o = testing::robustness_options(dir_.path(), /*anchor_every=*/0);
    auto w = JournalWriter::open(o);
    ASSERT_TRUE(w.ok()) << w.status().message();
    writer_ = std::move(*w);
    ASSERT_TRUE(writer_->publish(0, model_.tensors(), {}).ok());
    reader_ = std::make_unique<CatchUpReader>(dir_.path(), model_.destinations(&storage_));
    ASSERT_TRUE(reader_->catch_up(0).ok());
  }

  // Version v from every rank in `ranks` (threads, as separate trainer processes would),
  // while the writer waits for all kRanks of them for `wait`.
  Result<PublishReport> publish(uint64_t v, const std::vector<uint32_t>& ranks,
                                std::chrono::milliseconds wait = kWait) {
    JournalTestModel next(kSeed_);
    next.advance_to(v);
    const auto split = fsdp_split(model_);
    std::vector<Status> results(kRanks);
    std::vector<std::thread> threads;
    for (const uint32_t r : ranks) {
      threads.emplace_back(
          [&, r] { results[r] = write_fragment(dir_.path(), v, r, split[r], model_, next); });
    }
    auto report = writer_->publish_rank_fragments(v, kRanks, wait);
    for (auto& t : threads) t.join();
    for (const uint32_t r : ranks) EXPECT_TRUE(results[r].ok()) << results[r].message();
    if (report.ok()) model_.advance_to(v);
    return report;
  }

  void expect_reader_holds_model(uint64_t v) {
    auto report = reader_->catch_up(v);
    ASSERT_TRUE(report.ok()) << report.status().message();
    ASSERT_EQ(reader_->held(), std::optional<uint64_t>(v));
    for (size_t i = 0; i < model_.size(); ++i) {
      EXPECT_EQ(storage_[i], model_.bytes(i)) << "tensor " << i << " at version " << v;
    }
  }

  static constexpr uint64_t kSeed_ = 41;
  ScratchDir dir_;
  JournalTestModel model_{kSeed_};
  std::unique_ptr<JournalWriter> writer_;
  std::vector<std::vector<uint8_t>> storage_;
  std::unique_ptr<CatchUpReader> reader_;
};

TEST_F(JournalRanks, FourFsdpRanksCommitEachVersionOnceAndAReaderFollowsBitExact) {
  const auto split = fsdp_split(model_);
  size_t crossing = 0;  // tensors split between ranks
  for (size_t i = 0; i < model_.size(); ++i) {
    std::set<size_t> owners;
    for (size_t r = 0; r < split.size(); ++r) {
      for (const Owned& o : split[r]) owners.insert(o.tensor == i ? r : SIZE_MAX);
    }
    owners.erase(SIZE_MAX);
    crossing += owners.size() > 1 ? 1 : 0;
  }
  ASSERT_GE(crossing, 2u) << "the split must cut tensors between ranks";
  for (uint64_t v = 1; v <= 4; ++v) {
    auto report = publish(v, {0, 1, 2, 3});
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_GT(report->changed_elements, 0u);
    ASSERT_EQ(writer_->head()->version(), v);
    const proto::StepManifest& m = *writer_->head_manifest();
    size_t ranged = 0;
    for (const auto& t : m.tensors()) ranged += t.ranges_size() > 1 ? 1 : 0;
    EXPECT_EQ(ranged, crossing);
    EXPECT_FALSE(std::filesystem::exists(rank_fragments_dir(JournalLayout(dir_.path()), v)));
    expect_reader_holds_model(v);
  }
  // A fragment a late rank left for a committed version goes with the next commit; one of a
  // version still to come stays.
  const JournalLayout layout(dir_.path());
  std::filesystem::create_directories(rank_fragment_dir(layout, 4, 3));
  std::filesystem::create_directories(rank_fragment_dir(layout, 6, 1));
  // The single writer goes on from a version the ranks wrote: its head checksums are whole.
  JournalTestModel next(kSeed_);
  next.advance_to(5);
  auto prev = model_.tensors();
  ASSERT_TRUE(writer_->publish(5, next.tensors(), prev).ok());
  model_.advance_to(5);
  expect_reader_holds_model(5);
  EXPECT_FALSE(std::filesystem::exists(rank_fragments_dir(layout, 4)));
  EXPECT_TRUE(std::filesystem::exists(rank_fragment_dir(layout, 6, 1)));
  // A fresh reader replays the ranks' versions from the anchor.
  std::vector<std::vector<uint8_t>> fresh_storage;
  CatchUpReader fresh(dir_.path(), model_.destinations(&fresh_storage));
  auto report = fresh.catch_up();
  ASSERT_TRUE(report.ok()) << report.status().message();
  for (size_t i = 0; i < model_.size(); ++i) EXPECT_EQ(fresh_storage[i], model_.bytes(i));
}

TEST_F(JournalRanks, ARankThatNeverFinishesLeavesTheVersionUncommittedAndItCommitsOnceBack) {
  auto report = publish(1, {0, 1, 3}, std::chrono::milliseconds(300));
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(report.status().message().find("publisher rank 2 of 4"), std::string::npos)
      << report.status().message();
  EXPECT_EQ(writer_->head()->version(), 0u);
  EXPECT_FALSE(std::filesystem::exists(rank_fragments_dir(JournalLayout(dir_.path()), 1)));
  ASSERT_TRUE(reader_->catch_up().ok());
  EXPECT_EQ(reader_->held(), std::optional<uint64_t>(0));
  ASSERT_TRUE(publish(1, {0, 1, 2, 3}).ok());
  expect_reader_holds_model(1);
}

TEST_F(JournalRanks, ARankKilledMidFragmentLeavesTheVersionUncommitted) {
  JournalTestModel next(kSeed_);
  next.advance_to(1);
  const auto split = fsdp_split(model_);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rank 2 writes one piece, then dies before its fragment is in place.
    DeltaPartOptions parts;
    parts.part_bytes = 64;
    auto w = RankFragmentWriter::open(dir_.path(), 1, 2, parts);
    if (!w.ok()) ::_exit(3);
    const auto tensors = next.tensors();
    const Owned& o = split[2].front();
    const size_t es = dtype_size(tensors[o.tensor].dtype);
    EncodeOptions e;
    e.name = tensors[o.tensor].name;
    e.dtype = tensors[o.tensor].dtype;
    e.base_version = 0;
    e.target_version = 1;
    e.range_offset = o.first;
    e.tensor_elements = next.bytes(o.tensor).size() / es;
    auto d = encode_delta(std::span(model_.bytes(o.tensor)).subspan(o.first * es, o.count * es),
                          std::span(next.bytes(o.tensor)).subspan(o.first * es, o.count * es), e);
    if (!d.ok() || !(*w)->add_range(e.name, e.dtype, tensors[o.tensor].shape, *d).ok()) ::_exit(4);
    ::raise(SIGKILL);
    ::_exit(5);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  const JournalLayout layout(dir_.path());
  EXPECT_TRUE(std::filesystem::exists(rank_fragment_dir(layout, 1, 2) + ".tmp"));
  auto report = publish(1, {0, 1, 3}, std::chrono::milliseconds(300));
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("rank 2 of 4"), std::string::npos);
  EXPECT_EQ(writer_->head()->version(), 0u);
  ASSERT_TRUE(reader_->catch_up().ok());
  EXPECT_EQ(reader_->held(), std::optional<uint64_t>(0));
  ASSERT_TRUE(publish(1, {0, 1, 2, 3}).ok());
  expect_reader_holds_model(1);
}

// Version 1 from fragments written by `split` (not the even one), from `before`.
Result<PublishReport> publish_split(JournalWriter* writer, const std::string& root,
                                    const std::vector<std::vector<Owned>>& split,
                                    const JournalTestModel& before, const JournalTestModel& after,
                                    const std::vector<int64_t>* rank3_shape = nullptr) {
  for (uint32_t r = 0; r < split.size(); ++r) {
    if (r == 3 && rank3_shape != nullptr) {
      auto w = RankFragmentWriter::open(root, 1, r);
      if (!w.ok()) return w.status();
      const Owned& o = split[r].front();
      const auto tensors = after.tensors();
      const size_t es = dtype_size(tensors[o.tensor].dtype);
      RETURN_IF_ERROR((*w)->add_unchanged_range(
          tensors[o.tensor].name, tensors[o.tensor].dtype, *rank3_shape,
          TensorSlice::flat(o.first, o.first + o.count),
          checksum_range(after.bytes(o.tensor).data() + o.first * es, es, o.count, o.first)));
      RETURN_IF_ERROR((*w)->finish());
      continue;
    }
    RETURN_IF_ERROR(write_fragment(root, 1, r, split[r], before, after));
  }
  return writer->publish_rank_fragments(1, static_cast<uint32_t>(split.size()),
                                        std::chrono::milliseconds(2000));
}

TEST_F(JournalRanks, OverlapsHolesShapesAndOtherBasesAreRefusedByName) {
  JournalTestModel next(kSeed_);
  next.advance_to(1);
  const auto even = fsdp_split(model_);
  const std::string q = "'layers.0.attn.q_proj.weight'";
  // Rank 1's first piece (inside q_proj) starts 5 elements early: overlap with rank 0.
  auto overlap = even;
  ASSERT_EQ(overlap[1].front().tensor, 0u);
  overlap[1].front().first -= 5;
  overlap[1].front().count += 5;
  auto report = publish_split(writer_.get(), dir_.path(), overlap, model_, next);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find(q), std::string::npos) << report.status().message();
  EXPECT_NE(report.status().message().find("rank 0"), std::string::npos);
  EXPECT_NE(report.status().message().find("rank 1"), std::string::npos);
  EXPECT_NE(report.status().message().find("overlap"), std::string::npos);
  // ... starts 5 elements late: a hole.
  auto hole = even;
  hole[1].front().first += 5;
  hole[1].front().count -= 5;
  report = publish_split(writer_.get(), dir_.path(), hole, model_, next);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find(q), std::string::npos) << report.status().message();
  EXPECT_NE(report.status().message().find("no rank holds element"), std::string::npos);
  // Rank 3 declares its tensor with another shape (the same number of elements).
  const auto tensors = model_.tensors();
  std::vector<int64_t> other = tensors[even[3].front().tensor].shape;
  std::reverse(other.begin(), other.end());
  ASSERT_NE(other, tensors[even[3].front().tensor].shape);
  report = publish_split(writer_.get(), dir_.path(), even, model_, next, &other);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("rank 3"), std::string::npos)
      << report.status().message();
  EXPECT_NE(report.status().message().find("another dtype or shape"), std::string::npos);
  // The ranks encoded from version 2's bytes, not the head's.
  JournalTestModel two(kSeed_), three(kSeed_);
  two.advance_to(2);
  three.advance_to(3);
  report = publish_split(writer_.get(), dir_.path(), even, two, three);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("did not start from the head version"),
            std::string::npos)
      << report.status().message();
  EXPECT_EQ(writer_->head()->version(), 0u);
  ASSERT_TRUE(publish(1, {0, 1, 2, 3}).ok());
  expect_reader_holds_model(1);
}

TEST_F(JournalRanks, AManifestWhoseRangesDoNotAddUpIsRefused) {
  ASSERT_TRUE(publish(1, {0, 1, 2, 3}).ok());
  const proto::StepManifest good = *writer_->head_manifest();
  ASSERT_TRUE(check_manifest(good, "good").ok());
  int ranged = -1;
  for (int i = 0; i < good.tensors_size(); ++i) {
    if (good.tensors(i).ranges_size() > 1 && good.tensors(i).changed()) ranged = i;
  }
  ASSERT_GE(ranged, 0);
  const auto refused = [&](const std::function<void(proto::TensorState*)>& damage,
                           const std::string& words) {
    proto::StepManifest m = good;
    damage(m.mutable_tensors(ranged));
    Status s = check_manifest(m, "damaged");
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  refused([](proto::TensorState* t) { t->mutable_ranges()->RemoveLast(); }, "a hole");
  refused([](proto::TensorState* t) { t->mutable_ranges(1)->set_range_offset(0); }, "overlaps");
  refused([](proto::TensorState* t) { t->set_checksum(t->checksum() + 1); }, "not the sums");
  refused(
      [](proto::TensorState* t) {
        for (auto& r : *t->mutable_ranges()) {
          if (r.changed()) r.set_part(1000000);
        }
      },
      "names part");
  refused(
      [](proto::TensorState* t) {
        for (auto& r : *t->mutable_ranges()) {
          if (r.changed()) r.set_bytes(uint64_t{1} << 40);
        }
      },
      "outside its part");
  refused([](proto::TensorState* t) { t->mutable_ranges(0)->set_range_elements(0); },
          "empty or outside");
}

TEST_F(JournalRanks, AReaderRefusesRangesThatStartFromAnotherChecksumAndKeepsItsBytes) {
  ASSERT_TRUE(publish(1, {0, 1, 2, 3}).ok());
  ASSERT_TRUE(reader_->catch_up(1).ok());
  ASSERT_TRUE(publish(2, {0, 1, 2, 3}).ok());
  // The ranges of the first tensor say they start from another checksum than the one the
  // reader holds (the manifest still adds up: only the bases moved).
  const std::string path = JournalLayout(dir_.path()).step(2) + "/MANIFEST";
  auto m = read_manifest_file(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  proto::RangeRecord* r = m->mutable_tensors(0)->mutable_ranges(0);
  r->set_base_checksum(r->base_checksum() + 1);
  ASSERT_TRUE(write_journal_file(path, JournalFileKind::kManifest, *m).ok());
  const auto before = storage_;
  auto report = reader_->catch_up(2);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("'layers.0.attn.q_proj.weight' was written by several"),
            std::string::npos)
      << report.status().message();
  EXPECT_NE(report.status().message().find("start from"), std::string::npos);
  EXPECT_EQ(reader_->held(), std::optional<uint64_t>(1));
  EXPECT_EQ(storage_, before);
}

}  // namespace
}  // namespace weightcast
