// Engine ranks holding slices follow a journal whose deltas several publisher ranks wrote in
// ranges (rank_fragments.h): four FSDP-like ranks write each version with their shares of the
// layouts' slice checksums; readers of tensor-parallel layouts along dimension 0 and 1 and of
// an expert-parallel split read and apply only the records of the ranges their slices meet
// (bytes read counted) and stay bit-exact; a wrong slice checksum is refused and the version before
// kept, bytes untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <thread>

#include "codec/delta_manifest.h"
#include "tests/transport/journal_ranks_util.h"
#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;

constexpr uint64_t kSeed = 59;
constexpr uint32_t kRanks = 4;

using testing::declared;
using testing::gather;
using testing::Layout;
using testing::layouts;
using testing::slice_of;

class JournalRanksSlices : public ::testing::Test {
 protected:
  void SetUp() override {
    JournalOptions o = testing::robustness_options(dir_.path(), /*anchor_every=*/0);
    o.declared_slices = declared;
    auto w = JournalWriter::open(o);
    ASSERT_TRUE(w.ok()) << w.status().message();
    writer_ = std::move(*w);
    ASSERT_TRUE(writer_->publish(0, model_.tensors(), {}).ok());
  }

  Status publish(uint64_t v) {
    JournalTestModel next(kSeed);
    next.advance_to(v);
    const auto split = testing::fsdp_split(model_, {0.21, 0.5, 0.62});
    std::vector<Status> results(kRanks);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        results[r] = testing::write_fragment(dir_.path(), v, r, split[r], model_, next, declared);
      });
    }
    auto report = writer_->publish_rank_fragments(v, kRanks, std::chrono::milliseconds(20000));
    for (auto& t : threads) t.join();
    for (const Status& s : results) RETURN_IF_ERROR(s);
    RETURN_IF_ERROR(report.status());
    model_.advance_to(v);
    return ok_status();
  }

  std::unique_ptr<CatchUpReader> reader(const Layout& l, int64_t part,
                                        std::vector<std::vector<uint8_t>>* storage) {
    std::vector<ReaderDestination> d = model_.destinations(storage);
    for (size_t i = 0; i < d.size(); ++i) {
      const TensorSlice s = slice_of(l, part, d[i].name, d[i].shape);
      (*storage)[i].assign(slice_elements(d[i].shape, s) * dtype_size(d[i].dtype), 0xEE);
      d[i].bytes = (*storage)[i];
      d[i].slice = s;
    }
    return std::make_unique<CatchUpReader>(dir_.path(), std::move(d));
  }

  // Empty when every destination holds the model's slice now.
  std::string mismatch(const Layout& l, int64_t part,
                       const std::vector<std::vector<uint8_t>>& storage) const {
    const auto tensors = model_.tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorSlice s = slice_of(l, part, tensors[i].name, tensors[i].shape);
      if (storage[i] !=
          gather(model_.bytes(i), tensors[i].shape, s, dtype_size(tensors[i].dtype))) {
        return std::string(l.name) + " part " + std::to_string(part) + ": tensor '" +
               tensors[i].name + "' slice " + describe_slice(s);
      }
    }
    return "";
  }

  testing::ScratchDir dir_;
  JournalTestModel model_{kSeed};
  std::unique_ptr<JournalWriter> writer_;
};

TEST_F(JournalRanksSlices, EveryPartOfEveryLayoutFollowsTheRanksVersionsBitExact) {
  struct Engine {
    const Layout* layout;
    int64_t part;
    std::vector<std::vector<uint8_t>> storage;
    std::unique_ptr<CatchUpReader> reader;
  };
  std::vector<Engine> engines;
  for (const Layout& l : layouts()) {
    for (int64_t p = 0; p < l.parts; ++p) engines.push_back({&l, p, {}, nullptr});
  }
  for (Engine& e : engines) {
    e.reader = reader(*e.layout, e.part, &e.storage);
    ASSERT_TRUE(e.reader->catch_up(0).ok());
  }
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(publish(v).ok());
    const proto::StepManifest& m = *writer_->head_manifest();
    size_t ranged = 0;
    for (const auto& t : m.tensors()) ranged += t.ranges_size() > 1 ? 1 : 0;
    ASSERT_GE(ranged, 2u);
    uint64_t step_bytes = 0;
    for (const auto& p : m.parts()) step_bytes += p.bytes();
    for (Engine& e : engines) {
      // What the rank needs: the records of the changed ranges its slices lie between.
      uint64_t needed = 0;
      const auto tensors = model_.tensors();
      for (int i = 0; i < m.tensors_size(); ++i) {
        const TensorSlice s = slice_of(*e.layout, e.part, tensors[i].name, tensors[i].shape);
        const SliceLocator span(tensors[i].shape, s);
        for (const auto& r : m.tensors(i).ranges()) {
          const bool meets =
              r.range_offset() < span.end() && r.range_offset() + r.range_elements() > span.first();
          if (r.changed() && meets) needed += r.bytes();
        }
      }
      const uint64_t read_before = e.reader->delta_bytes_read();
      auto report = e.reader->catch_up(v);
      ASSERT_TRUE(report.ok()) << e.layout->name << " part " << e.part << ": "
                               << report.status().message();
      ASSERT_EQ(e.reader->held(), std::optional<uint64_t>(v));
      EXPECT_EQ(mismatch(*e.layout, e.part, e.storage), "") << "version " << v;
      const uint64_t read = e.reader->delta_bytes_read() - read_before;
      EXPECT_EQ(read, needed) << e.layout->name << " part " << e.part << " version " << v;
      EXPECT_LT(read, step_bytes) << e.layout->name << " part " << e.part;
      std::printf("version %llu, %s part %lld: read %llu of the step's %llu bytes (%.2f)\n",
                  static_cast<unsigned long long>(v), e.layout->name,
                  static_cast<long long>(e.part), static_cast<unsigned long long>(read),
                  static_cast<unsigned long long>(step_bytes),
                  static_cast<double>(read) / static_cast<double>(step_bytes));
    }
  }
}

TEST_F(JournalRanksSlices, AWrongSliceChecksumIsRefusedAndTheVersionBeforeKept) {
  const Layout& tp = layouts()[1];
  std::vector<std::vector<uint8_t>> storage;
  auto r = reader(tp, 1, &storage);
  ASSERT_TRUE(r->catch_up(0).ok());
  ASSERT_TRUE(publish(1).ok());
  const std::string path = JournalLayout(dir_.path()).step(1) + "/MANIFEST";
  auto m = read_manifest_file(path);
  ASSERT_TRUE(m.ok());
  const auto tensors = model_.tensors();
  const TensorSlice mine = slice_of(tp, 1, tensors[0].name, tensors[0].shape);
  bool damaged = false;
  for (auto& e : *m->mutable_slice_checksums()) {
    if (e.tensor() == tensors[0].name && slice_from_proto(e.slice()) == mine) {
      e.set_checksum(e.checksum() + 1);
      damaged = true;
    }
  }
  ASSERT_TRUE(damaged);
  ASSERT_TRUE(write_journal_file(path, JournalFileKind::kManifest, *m).ok());
  const auto before = storage;
  auto report = r->catch_up(1);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kChecksumMismatch);
  EXPECT_NE(report.status().message().find("'layers.0.attn.q_proj.weight' slice [0:64, 64:128]"),
            std::string::npos)
      << report.status().message();
  EXPECT_EQ(r->held(), std::optional<uint64_t>(0));
  EXPECT_EQ(storage, before);
  // Another replica's rank, whose slice checksums are right, takes the version.
  std::vector<std::vector<uint8_t>> other;
  auto r0 = reader(layouts()[0], 0, &other);
  ASSERT_TRUE(r0->catch_up(1).ok());
  EXPECT_EQ(mismatch(layouts()[0], 0, other), "");
}

}  // namespace
}  // namespace weightcast
