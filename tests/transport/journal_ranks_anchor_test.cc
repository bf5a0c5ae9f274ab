// Anchors written by several publisher ranks (rank_anchor.h): four FSDP-like ranks pwrite the
// ranges they own into the shard files the journal's writer staged, and the writer commits one
// Hugging Face checkpoint. Readers holding whole tensors and readers of every engine layout
// load it bit-exact and follow the ranks' deltas after it; the shards open in the
// `safetensors` package; a missing rank, a range written twice or a hole leave no anchor.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <thread>

#include "tests/transport/journal_ranks_util.h"
#include "tests/transport/journal_robustness_util.h"
#include "tests/transport/safetensors_interop.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;
using testing::Owned;

constexpr uint64_t kSeed = 67;
constexpr uint32_t kRanks = 4;

class JournalRanksAnchor : public ::testing::Test {
 protected:
  void SetUp() override {
    JournalOptions o = testing::robustness_options(dir_.path(), /*anchor_every=*/0);
    o.declared_slices = testing::declared;
    auto w = JournalWriter::open(o);
    ASSERT_TRUE(w.ok()) << w.status().message();
    writer_ = std::move(*w);
  }

  // Anchor `v` of model_ from the ranks in `ranks` writing `split`.
  Result<PublishReport> publish_anchor(uint64_t v, const std::vector<uint32_t>& ranks,
                                       const std::vector<std::vector<Owned>>& split,
                                       std::chrono::milliseconds wait) {
    ASSIGN_OR_RETURN(const std::string staged,
                     writer_->stage_rank_anchor(v, testing::specs_of(model_)));
    std::vector<Status> results(kRanks);
    std::vector<std::thread> threads;
    for (const uint32_t r : ranks) {
      threads.emplace_back([&, r] {
        results[r] = testing::write_anchor_part(dir_.path(), v, r, split[r], model_,
                                                writer_->anchor_options(), testing::declared);
      });
    }
    auto report = writer_->publish_rank_anchor(v, kRanks, wait);
    for (auto& t : threads) t.join();
    for (const uint32_t r : ranks) RETURN_IF_ERROR(results[r]);
    return report;
  }

  testing::ScratchDir dir_;
  JournalTestModel model_{kSeed};
  std::unique_ptr<JournalWriter> writer_;
};

TEST_F(JournalRanksAnchor, ReadersOfEveryLayoutLoadTheRanksAnchorAndFollowTheirDeltas) {
  const auto split = testing::fsdp_split(model_, {0.3, 0.35, 0.8});
  auto report = publish_anchor(0, {0, 1, 2, 3}, split, std::chrono::milliseconds(20000));
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->anchor);
  EXPECT_FALSE(std::filesystem::exists(rank_fragments_dir(JournalLayout(dir_.path()), 0)));
  std::vector<std::vector<uint8_t>> whole;
  CatchUpReader whole_reader(dir_.path(), model_.destinations(&whole));
  ASSERT_TRUE(whole_reader.catch_up(0).ok());
  for (size_t i = 0; i < model_.size(); ++i) EXPECT_EQ(whole[i], model_.bytes(i)) << i;
  for (const testing::Layout& l : testing::layouts()) {
    for (int64_t part = 0; part < l.parts; ++part) {
      std::vector<ReaderDestination> d = model_.destinations(&whole);
      std::vector<std::vector<uint8_t>> storage(d.size());
      for (size_t i = 0; i < d.size(); ++i) {
        d[i].slice = testing::slice_of(l, part, d[i].name, d[i].shape);
        storage[i].assign(slice_elements(d[i].shape, *d[i].slice) * dtype_size(d[i].dtype), 0);
        d[i].bytes = storage[i];
      }
      CatchUpReader r(dir_.path(), std::move(d));
      auto caught = r.catch_up();
      ASSERT_TRUE(caught.ok()) << l.name << " part " << part << ": " << caught.status().message();
      // Then a delta the ranks wrote on top of their anchor.
      JournalTestModel next(kSeed);
      next.advance_to(1);
      if (!writer_->head() || writer_->head()->version() == 0) {
        std::vector<Status> results(kRanks);
        std::vector<std::thread> threads;
        for (uint32_t rank = 0; rank < kRanks; ++rank) {
          threads.emplace_back([&, rank] {
            results[rank] = testing::write_fragment(dir_.path(), 1, rank, split[rank], model_, next,
                                                    testing::declared);
          });
        }
        auto delta = writer_->publish_rank_fragments(1, kRanks, std::chrono::milliseconds(20000));
        for (auto& t : threads) t.join();
        for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.message();
        ASSERT_TRUE(delta.ok()) << delta.status().message();
      }
      caught = r.catch_up(1);
      ASSERT_TRUE(caught.ok()) << l.name << " part " << part << ": " << caught.status().message();
      const auto tensors = next.tensors();
      for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorSlice s = testing::slice_of(l, part, tensors[i].name, tensors[i].shape);
        EXPECT_EQ(storage[i],
                  testing::gather(next.bytes(i), tensors[i].shape, s, dtype_size(tensors[i].dtype)))
            << l.name << " part " << part << " tensor " << tensors[i].name;
      }
    }
  }
}

TEST_F(JournalRanksAnchor, TheRanksShardsOpenInTheSafetensorsPackageAndEqualTheModel) {
  const std::string unavailable = testing::safetensors_unavailable(dir_.path());
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  ASSERT_TRUE(
      publish_anchor(0, {0, 1, 2, 3}, testing::fsdp_split(model_), std::chrono::milliseconds(20000))
          .ok());
  std::vector<testing::ExpectedTensor> expected;
  for (size_t i = 0; i < model_.size(); ++i) {
    const auto t = model_.tensors()[i];
    expected.push_back({t.name, t.dtype, t.shape, model_.bytes(i)});
  }
  std::string output;
  const int rc = testing::check_anchor_with_safetensors(JournalLayout(dir_.path()).step(0),
                                                        expected, dir_.path(), &output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_NE(output.find(std::to_string(expected.size()) + " tensors in"), std::string::npos)
      << output;
}

TEST_F(JournalRanksAnchor, AMissingRankARangeWrittenTwiceOrAHoleLeaveNoAnchor) {
  const auto even = testing::fsdp_split(model_);
  const JournalLayout layout(dir_.path());
  const auto nothing_left = [&] {
    EXPECT_FALSE(writer_->head().has_value());
    EXPECT_FALSE(std::filesystem::exists(layout.staging() + "/" + JournalLayout::step_dir_name(0)));
    EXPECT_FALSE(std::filesystem::exists(rank_fragments_dir(layout, 0)));
  };
  auto report = publish_anchor(0, {0, 1, 3}, even, std::chrono::milliseconds(300));
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(report.status().message().find("rank 2 of 4"), std::string::npos)
      << report.status().message();
  nothing_left();
  auto overlap = even;
  overlap[2].front().first -= 3;
  overlap[2].front().count += 3;
  report = publish_anchor(0, {0, 1, 2, 3}, overlap, std::chrono::milliseconds(20000));
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("written twice"), std::string::npos)
      << report.status().message();
  nothing_left();
  auto hole = even;
  hole[2].front().first += 3;
  hole[2].front().count -= 3;
  report = publish_anchor(0, {0, 1, 2, 3}, hole, std::chrono::milliseconds(20000));
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find(model_.tensors()[even[2].front().tensor].name),
            std::string::npos)
      << report.status().message();
  nothing_left();
  ASSERT_TRUE(publish_anchor(0, {0, 1, 2, 3}, even, std::chrono::milliseconds(20000)).ok());
  EXPECT_EQ(writer_->head()->version(), 0u);
}

}  // namespace
}  // namespace weightcast
