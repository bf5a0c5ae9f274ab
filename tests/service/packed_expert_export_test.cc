// Packed-expert export through the planner and the host executor.
#include "src/packed_expert_export.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "codec/base/thread_pool.h"

namespace weightcast {
namespace {

struct Fixture {
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<PackedParameter> params;
};

// Eight experts, two packed parameters (gate_up_proj [8, 6, 4], down_proj [8, 4, 3]), each
// with master, exp_avg and exp_avg_sq.
Fixture eight_experts() {
  Fixture f;
  std::mt19937 rng(3);
  const std::vector<std::pair<const char*, std::vector<int64_t>>> shapes = {
      {"gate_up_proj", {8, 6, 4}}, {"down_proj", {8, 4, 3}}};
  f.buffers.reserve(6);
  for (const auto& [suffix, shape] : shapes) {
    const size_t bytes = static_cast<size_t>(shape[0] * shape[1] * shape[2]) * 4;
    PackedParameter p{"model.layers.0.mlp.experts", suffix, DType::kF32, shape, {}, {}, {}};
    std::span<const uint8_t>* states[] = {&p.master, &p.exp_avg, &p.exp_avg_sq};
    for (auto* state : states) {
      f.buffers.emplace_back(bytes);
      for (auto& b : f.buffers.back()) b = static_cast<uint8_t>(rng());
      *state = f.buffers.back();
    }
    f.params.push_back(p);
  }
  return f;
}

void expect_same(const ExpertExport& a, const ExpertExport& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    ASSERT_EQ(a.tensors[i].bytes.size(), b.tensors[i].bytes.size());
    EXPECT_EQ(0, std::memcmp(a.tensors[i].bytes.data(), b.tensors[i].bytes.data(),
                             a.tensors[i].bytes.size()))
        << a.tensors[i].name;
  }
}

TEST(PackedExpertExport, FortyEightCallsBecomeSixWithIdenticalBytesAndNames) {
  const Fixture f = eight_experts();
  ThreadPool pool(2);
  auto per_slice = export_packed_experts(f.params, {}, /*coalesce=*/false, &pool);
  auto coalesced = export_packed_experts(f.params, {}, /*coalesce=*/true, &pool);
  ASSERT_TRUE(per_slice.ok() && coalesced.ok());
  EXPECT_EQ(per_slice->staged.transfer_calls(), 48u);
  EXPECT_EQ(coalesced->staged.transfer_calls(), 6u);
  EXPECT_EQ(per_slice->staged.staged_bytes(), coalesced->staged.staged_bytes());
  expect_same(*per_slice, *coalesced);
  EXPECT_EQ(coalesced->tensors[9].name, "model.layers.0.mlp.experts.1.down_proj");
  EXPECT_EQ(coalesced->tensors[16].name,
            "optimizer.exp_avg.model.layers.0.mlp.experts.0.gate_up_proj");
  // Expert 5 of gate_up_proj's master is bytes [5 * 96, 6 * 96) of the packed buffer.
  EXPECT_EQ(0, std::memcmp(coalesced->tensors[5].bytes.data(), f.buffers[0].data() + 5 * 96, 96));
}

TEST(PackedExpertExport, SparseAndReorderedExpertsFallBackWithTheSameBytes) {
  const Fixture f = eight_experts();
  for (std::vector<uint32_t> subset :
       {std::vector<uint32_t>{0, 2, 5}, std::vector<uint32_t>{7, 6, 5, 4, 3, 2, 1, 0}}) {
    auto per_slice = export_packed_experts(f.params, subset, false);
    auto coalesced = export_packed_experts(f.params, subset, true);
    ASSERT_TRUE(per_slice.ok() && coalesced.ok());
    EXPECT_EQ(coalesced->staged.transfer_calls(), per_slice->staged.transfer_calls());
    expect_same(*per_slice, *coalesced);
  }
}

TEST(PackedExpertExport, SlicesSurviveTheSourceBeingOverwritten) {
  Fixture f = eight_experts();
  auto exported = export_packed_experts(f.params, {}, true);
  ASSERT_TRUE(exported.ok());
  const std::vector<uint8_t> before(exported->tensors[3].bytes.begin(),
                                    exported->tensors[3].bytes.end());
  for (auto& b : f.buffers) std::fill(b.begin(), b.end(), 0xEE);  // the optimizer steps on
  EXPECT_TRUE(std::equal(before.begin(), before.end(), exported->tensors[3].bytes.begin()));
}

TEST(PackedExpertExport, CancellationReleasesStaging) {
  std::vector<uint8_t> big(64u << 20, 1);
  std::vector<CopyRequest> r = {
      {"all", 0, big.size(), 0, big.size(), DType::kU8, {int64_t(big.size())}}};
  const uint8_t* sources[] = {big.data()};
  CancelToken cancel;
  cancel.cancelled = true;
  auto staged = execute_copy_plan(plan_copies(r), r, sources, nullptr, &cancel);
  ASSERT_FALSE(staged.ok());
  EXPECT_NE(staged.status().message().find("cancelled"), std::string::npos);  // ASan: no leak
}

TEST(PackedExpertExport, TwoPlansRunConcurrently) {
  const Fixture f = eight_experts();
  auto reference = export_packed_experts(f.params, {}, false);
  ASSERT_TRUE(reference.ok());
  ThreadPool pool_a(2), pool_b(2);
  Result<ExpertExport> a = internal_error("not run"), b = internal_error("not run");
  std::thread ta([&] { a = export_packed_experts(f.params, {}, true, &pool_a); });
  std::thread tb([&] { b = export_packed_experts(f.params, {}, true, &pool_b); });
  ta.join();
  tb.join();
  ASSERT_TRUE(a.ok() && b.ok());
  expect_same(*reference, *a);
  expect_same(*reference, *b);
}

TEST(PackedExpertExport, OutOfRangeRequestsAndBadShapesNameTheCulprit) {
  Fixture f = eight_experts();
  f.params[1].exp_avg = f.params[1].exp_avg.first(10);
  auto bad = export_packed_experts(f.params, {}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("down_proj"), std::string::npos);
  const uint32_t missing[] = {9};
  EXPECT_FALSE(export_packed_experts(eight_experts().params, missing, true).ok());
}

}  // namespace
}  // namespace weightcast
