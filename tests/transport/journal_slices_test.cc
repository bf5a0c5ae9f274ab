// Engine ranks that hold slices of the model read the journal (ReaderDestination::slice):
// the writer puts every declared slice's checksum into each manifest (slice_checksums.h), and
// a reader of each part of each layout (tensor parallel along every dimension, uneven splits,
// an expert split) follows the journal through deltas, anchors and anchors' delta/ dirs with
// its slices bit-exact to the model; an anchor is read slice by slice; a slice no layout
// declares is refused by name; a wrong slice checksum is refused and the version before held.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "codec/delta_manifest.h"
#include "tests/transport/journal_ranks_util.h"
#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/slice_checksums.h"
#include "transport/fs/step_commit.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;

constexpr uint64_t kSeed = 23;
constexpr uint64_t kHead = 7;  // anchors at 0, 3 and 6

// A layout: for some tensors, the dimension it splits (into `parts`).
struct Layout {
  int64_t parts;
  std::map<std::string, int64_t> dims;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {2, {{"layers.0.attn.q_proj.weight", 0}, {"layers.0.mlp.experts.weight", 2}}},
      {2, {{"layers.0.attn.q_proj.weight", 1}, {"layers.0.norm.weight", 0}}},
      {4, {{"layers.0.mlp.experts.weight", 0}, {"quant.codes", 0}}},
  };
  return all;
}

using testing::gather;
using testing::slice_of;

// What the publisher's layouts declare (src/control/layouts.h does this from the config).
Result<std::vector<TensorSlice>> declared(const std::string& name,
                                          const std::vector<int64_t>& shape) {
  return testing::declared_by(layouts(), name, shape);
}

class JournalSlices : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScratchDir;
    JournalOptions o = testing::robustness_options(dir_->path());
    o.declared_slices = declared;
    JournalTestModel model(kSeed);
    auto writer = JournalWriter::open(o);
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    ASSERT_TRUE(testing::publish_model_through(writer->get(), &model, kHead).ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // A reader of part `part` of layout `l` of the journal at `root` (default: the suite's):
  // slices where the layout splits, whole elsewhere, held in `storage`.
  std::unique_ptr<CatchUpReader> reader(const Layout& l, int64_t part,
                                        std::vector<std::vector<uint8_t>>* storage,
                                        const JournalTestModel& model, std::string root = "") {
    std::vector<ReaderDestination> d = model.destinations(storage);
    for (size_t i = 0; i < d.size(); ++i) {
      const TensorSlice s = slice_of(l, part, d[i].name, d[i].shape);
      (*storage)[i].assign(slice_elements(d[i].shape, s) * dtype_size(d[i].dtype), 0xEE);
      d[i].bytes = (*storage)[i];
      d[i].slice = s;
    }
    return std::make_unique<CatchUpReader>(root.empty() ? dir_->path() : root, std::move(d));
  }

  // Empty when every destination holds the model's slice at `version`.
  std::string mismatch(const Layout& l, int64_t part,
                       const std::vector<std::vector<uint8_t>>& storage, uint64_t version) {
    JournalTestModel model(kSeed);
    model.advance_to(version);
    const auto tensors = model.tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorSlice s = slice_of(l, part, tensors[i].name, tensors[i].shape);
      if (storage[i] != gather(model.bytes(i), tensors[i].shape, s, dtype_size(tensors[i].dtype))) {
        return "tensor '" + tensors[i].name + "' slice " + describe_slice(s) + " at version " +
               std::to_string(version);
      }
    }
    return "";
  }

  static testing::ScratchDir* dir_;
};

testing::ScratchDir* JournalSlices::dir_ = nullptr;

TEST_F(JournalSlices, ManifestsCarryEveryDeclaredSlicesChecksum) {
  JournalTestModel model(kSeed);
  for (uint64_t v = 0; v <= kHead; ++v) {
    model.advance_to(v);
    auto m = read_manifest_file(JournalLayout(dir_->path()).manifest(v));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const auto tensors = model.tensors();
    const SliceChecksumIndex index(*m);
    size_t expected_entries = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto slices = declared(tensors[i].name, tensors[i].shape);
      expected_entries += slices->size();
      uint64_t sum = 0;
      for (const TensorSlice& s : *slices) {
        const proto::SliceChecksum* entry = index.find(tensors[i].name, s);
        ASSERT_NE(entry, nullptr) << tensors[i].name << " " << describe_slice(s) << " v" << v;
        const size_t es = dtype_size(tensors[i].dtype);
        const auto bytes = gather(model.bytes(i), tensors[i].shape, s, es);
        uint64_t c = 0;
        for_each_slice_run(tensors[i].shape, s, [&](const SliceRun& r) {
          c += checksum_range(bytes.data() + r.local * es, es, r.count, r.global);
          return true;
        });
        EXPECT_EQ(entry->checksum(), c) << tensors[i].name << " " << describe_slice(s);
        sum += c;
      }
      // A layout's parts add up to the tensor's checksum (the third layout cuts 4 parts).
      if (tensors[i].name == "quant.codes") {
        EXPECT_EQ(sum, model.checksum(i));
      }
    }
    EXPECT_EQ(static_cast<size_t>(m->slice_checksums_size()), expected_entries) << "v" << v;
  }
}

TEST_F(JournalSlices, EveryPartOfEveryLayoutFollowsTheJournalBitExact) {
  JournalTestModel shapes(kSeed);
  for (const Layout& l : layouts()) {
    for (int64_t part = 0; part < l.parts; ++part) {
      // Version by version: anchor 0, then deltas (those of 3 and 6 from the anchors' delta/).
      std::vector<std::vector<uint8_t>> storage;
      auto r = reader(l, part, &storage, shapes);
      for (uint64_t v = 0; v <= kHead; ++v) {
        auto report = r->catch_up(v);
        ASSERT_TRUE(report.ok()) << report.status().to_string();
        ASSERT_EQ(r->held(), std::optional<uint64_t>(v));
        ASSERT_EQ(mismatch(l, part, storage, v), "");
      }
      // From nothing to the head: anchor 6 read slice by slice, then delta 7.
      std::vector<std::vector<uint8_t>> fresh;
      auto late = reader(l, part, &fresh, shapes);
      auto report = late->catch_up();
      ASSERT_TRUE(report.ok()) << report.status().to_string();
      EXPECT_EQ(report->anchors_loaded, 1u);
      ASSERT_EQ(mismatch(l, part, fresh, kHead), "");
    }
  }
}

TEST_F(JournalSlices, ASliceNoLayoutDeclaresIsRefusedByName) {
  JournalTestModel shapes(kSeed);
  const Layout quarters{4, {{"layers.0.attn.q_proj.weight", 0}}};
  std::vector<std::vector<uint8_t>> storage;
  auto r = reader(quarters, 1, &storage, shapes);
  auto report = r->catch_up();
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find(
                "no checksum for slice [16:32, 0:128] of tensor 'layers.0.attn.q_proj.weight'"),
            std::string::npos)
      << report.status().message();
  EXPECT_FALSE(r->held().has_value());
}

TEST_F(JournalSlices, AWrongSliceChecksumIsRefusedAndTheVersionBeforeHeld) {
  // A copy of the journal whose version 5 lists a wrong checksum for one slice.
  testing::ScratchDir copy;
  ASSERT_TRUE(testing::copy_tree(dir_->path(), copy.path()));
  const JournalLayout layout(copy.path());
  auto m = read_manifest_file(layout.manifest(5));
  ASSERT_TRUE(m.ok());
  const Layout& l = layouts()[0];
  const TensorSlice victim = slice_of(l, 1, "layers.0.attn.q_proj.weight", {64, 128});
  bool forged = false;
  for (auto& e : *m->mutable_slice_checksums()) {
    if (e.tensor() == "layers.0.attn.q_proj.weight" && slice_from_proto(e.slice()) == victim) {
      e.set_checksum(e.checksum() + 1);
      forged = true;
    }
  }
  ASSERT_TRUE(forged);
  ASSERT_TRUE(write_manifest_file(layout.step(5), *m).ok());
  JournalTestModel shapes(kSeed);
  std::vector<std::vector<uint8_t>> storage;
  auto forged_reader = reader(l, 1, &storage, shapes, copy.path());
  ASSERT_TRUE(forged_reader->catch_up(4).ok());
  auto report = forged_reader->catch_up(5);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(forged_reader->held(), std::optional<uint64_t>(4));
  EXPECT_NE(report.status().message().find("layers.0.attn.q_proj.weight"), std::string::npos)
      << report.status().message();
  EXPECT_EQ(mismatch(l, 1, storage, 4), "");
}

TEST_F(JournalSlices, ACorruptSliceOfAnAnchorFallsBackToTheAnchorBefore) {
  // A copy of the journal whose anchor 6 has one byte of part 1's slice of the experts
  // tensor flipped in its shard file.
  testing::ScratchDir copy;
  ASSERT_TRUE(testing::copy_tree(dir_->path(), copy.path()));
  const JournalLayout layout(copy.path());
  auto m = read_manifest_file(layout.manifest(6));
  ASSERT_TRUE(m.ok());
  const Layout& l = layouts()[2];
  const std::vector<int64_t> shape = {8, 33, 17};
  const TensorSlice victim = slice_of(l, 1, "layers.0.mlp.experts.weight", shape);
  const proto::TensorState* t = nullptr;
  for (const auto& s : m->tensors()) {
    if (s.name() == "layers.0.mlp.experts.weight") t = &s;
  }
  ASSERT_NE(t, nullptr);
  uint64_t first = 0;
  for_each_slice_run(shape, victim, [&](const SliceRun& r) {
    first = r.global;
    return false;
  });
  const std::string shard = layout.step(6) + "/" + m->parts(static_cast<int>(t->part())).file();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(t->offset() + first * 2 + 3);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(at);
    f.write(&c, 1);
  }
  JournalTestModel shapes(kSeed);
  std::vector<std::vector<uint8_t>> storage;
  auto report = reader(l, 1, &storage, shapes, copy.path())->catch_up();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_FALSE(report->fallbacks.empty());
  EXPECT_NE(report->fallbacks[0].find("slice [2:4, 0:33, 0:17]"), std::string::npos)
      << report->fallbacks[0];
  EXPECT_NE(report->fallbacks[0].find("differs from the manifest's"), std::string::npos)
      << report->fallbacks[0];
  EXPECT_EQ(mismatch(l, 1, storage, kHead), "");
}

}  // namespace
}  // namespace weightcast
