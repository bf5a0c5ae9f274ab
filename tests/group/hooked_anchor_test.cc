// Hooked anchors (src/endpoint/publish_step.h): on an anchor version the step's writes go
// into the anchor's shard files while the step runs (they exist, full size, before
// publish_step), the anchor is moved into the journal at publish with the version's delta
// beside it, the engine verifies it, and the shards open in the `safetensors` package and
// equal the model (tests/transport/anchor_stream_check.py).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "tests/group/trainer_side.h"
#include "tests/transport/safetensors_interop.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {
namespace {

using namespace weightcast::testing;
using std::chrono::seconds;
namespace fs = std::filesystem;

// Every element of version v through `step`, two rows of each packed half at a time, `vec`
// in two pieces.
Status write_version(PublishStep& step, Weights& live, uint64_t v) {
  Weights next;
  next.set(v);
  for (const int64_t column : {int64_t{0}, int64_t{32}}) {
    for (int64_t row = 0; row < 4; row += 2) {
      TensorRef view{"rows", DType::kBF16, {2, 32}, {64, 1}, row * 64 + column, live.packed.data()};
      std::vector<uint16_t> values;
      for (int64_t r = row; r < row + 2; ++r) {
        for (int64_t c = 0; c < 32; ++c) values.push_back(next.packed[r * 64 + column + c]);
      }
      RETURN_IF_ERROR(
          step.write(view, TensorRef::contiguous("new", DType::kBF16, values.data(), 64)));
    }
  }
  for (const int64_t at : {int64_t{0}, int64_t{500}}) {
    RETURN_IF_ERROR(
        step.write(TensorRef::contiguous("vec", DType::kBF16, live.vec.data() + at, 500),
                   TensorRef::contiguous("new", DType::kBF16, next.vec.data() + at, 500)));
  }
  return ok_status();
}

// The shard files under `dir`.
std::vector<std::string> shards_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  }
  return out;
}

TEST(HookedAnchor, ShardsAreWrittenDuringTheStepAndOpenInTheSafetensorsPackage) {
  GroupSpec spec;
  spec.subscribers = 2;  // the second joins late
  spec.anchor_every = 3;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  auto p = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Weights live;
  live.set(0);
  for (const auto& r : live.refs())
    ASSERT_TRUE((*p)->register_tensor(r, TensorUpdates::kHooked).ok());
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, one_thread<SubscriberOptions>(2), engine, bad);
  ASSERT_NE(sub, nullptr);

  const JournalLayout layout(g.journal());
  const std::string stream = layout.staging() + "/stream-" + JournalLayout::step_dir_name(4);
  for (uint64_t v = 1; v <= 5; ++v) {
    auto step = (*p)->begin_step(v);
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    ASSERT_TRUE(write_version(**step, live, v).ok());
    if (v == 4) {
      // Version 4 is an anchor (every 3 after version 1): its shards exist before publish.
      const auto shards = shards_in(stream);
      ASSERT_EQ(shards.size(), 1u) << stream;
      EXPECT_GT(fs::file_size(shards[0]), 2u * (4 * 64 + 1000));
    } else {
      EXPECT_FALSE(fs::exists(stream)) << "version " << v;
    }
    auto h = (*p)->publish_step(*step);
    ASSERT_TRUE(h.ok());
    Status committed = h->wait_committed(in(seconds(30)));
    ASSERT_TRUE(committed.ok()) << "version " << v << ": " << committed.to_string();
  }
  EXPECT_FALSE(fs::exists(stream));
  auto v4 = read_manifest_file(layout.manifest(4));
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->kind(), proto::STEP_ANCHOR);
  EXPECT_TRUE(fs::exists(layout.step(4) + "/delta/MANIFEST"));  // the delta from version 3
  auto v5 = read_manifest_file(layout.manifest(5));
  ASSERT_TRUE(v5.ok());
  EXPECT_EQ(v5->kind(), proto::STEP_DELTA);
  EXPECT_TRUE(engine_at(*sub, engine, 5));
  EXPECT_TRUE(bad.empty()) << bad.front();

  // A fresh engine starting from anchor 4 is verified and carried to 5.
  Weights fresh;
  std::vector<std::string> fresh_bad;
  auto late = connect_engine(g, one_thread<SubscriberOptions>(3), fresh, fresh_bad);
  ASSERT_NE(late, nullptr);
  EXPECT_TRUE(engine_at(*late, fresh, 5));
  EXPECT_TRUE(fresh_bad.empty()) << fresh_bad.front();

  const std::string unavailable = safetensors_unavailable(g.dir());
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  // Version 4 as the check expects it: each tensor's elements in row-major order.
  Weights four;
  four.set(4);
  std::vector<std::vector<uint16_t>> rows;
  std::vector<ExpectedTensor> expected;
  const auto refs = four.refs();
  for (const auto& r : refs) {
    std::vector<uint16_t>& bits = rows.emplace_back();
    const ElementAddresser at(r);
    const auto* base = static_cast<const uint16_t*>(r.data) + r.offset;
    for (uint64_t k = 0; k < r.numel(); ++k) bits.push_back(base[at.offset_of(k)]);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = refs[i];
    expected.push_back({r.name,
                        DType::kBF16,
                        r.shape,
                        {reinterpret_cast<const uint8_t*>(rows[i].data()), rows[i].size() * 2}});
  }
  std::string output;
  const int rc = check_anchor_with_safetensors(layout.step(4), expected, g.dir(), &output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_NE(output.find("3 tensors in 1 shards equal the model"), std::string::npos) << output;
}

}  // namespace
}  // namespace weightcast
