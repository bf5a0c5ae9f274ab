#include "codec/copy_planner.h"

#include <gtest/gtest.h>

namespace weightcast {
namespace {

// Requests for experts `order` of a packed [E, 4] f32 source.
std::vector<CopyRequest> experts(uint32_t source, uint32_t n_experts, std::vector<uint32_t> order,
                                 DType dtype = DType::kF32) {
  const uint64_t per = 4 * dtype_size(dtype);
  std::vector<CopyRequest> r;
  for (uint32_t e : order) {
    r.push_back({"s" + std::to_string(source) + ".e" + std::to_string(e),
                 source,
                 n_experts * per,
                 e * per,
                 per,
                 dtype,
                 {4}});
  }
  return r;
}

std::vector<uint32_t> all(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

void append(std::vector<CopyRequest>* a, const std::vector<CopyRequest>& b) {
  a->insert(a->end(), b.begin(), b.end());
}

TEST(CopyPlanner, EightExpertFixtureIsSixTransfers) {
  // Two packed parameters x (master, exp_avg, exp_avg_sq) = six sources of eight experts.
  std::vector<CopyRequest> r;
  for (uint32_t s = 0; s < 6; ++s) append(&r, experts(s, 8, all(8)));
  ASSERT_EQ(r.size(), 48u);
  const CopyPlan per_slice = plan_per_slice(r);
  const CopyPlan plan = plan_copies(r);
  EXPECT_EQ(per_slice.transfers.size(), 48u);
  EXPECT_EQ(plan.transfers.size(), 6u);
  EXPECT_EQ(plan.total_bytes, per_slice.total_bytes);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(plan.slices[i].decision, MergeDecision::kMerged);
    const PlannedTransfer& t = plan.transfers[plan.slices[i].transfer];
    EXPECT_EQ(t.source, r[i].source);
    EXPECT_EQ(t.offset + plan.slices[i].offset, r[i].offset);  // the slice holds its bytes
  }
}

void expect_per_slice(const std::vector<CopyRequest>& r, MergeDecision why) {
  const CopyPlan plan = plan_copies(r);
  EXPECT_EQ(plan.transfers.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(plan.slices[i].decision, why)
        << r[i].name << ": " << merge_decision_name(plan.slices[i].decision);
    const PlannedTransfer& t = plan.transfers[plan.slices[i].transfer];
    EXPECT_EQ(t.offset, r[i].offset);
    EXPECT_EQ(t.bytes, r[i].bytes);
  }
}

TEST(CopyPlanner, SparseSubsetKeepsPerSlice) {
  expect_per_slice(experts(0, 8, {0, 1, 3, 4}), MergeDecision::kIncomplete);
}

TEST(CopyPlanner, ReversedOrderKeepsPerSlice) {
  expect_per_slice(experts(0, 4, {3, 2, 1, 0}), MergeDecision::kReordered);
}

TEST(CopyPlanner, InterleavedParametersKeepPerSlice) {
  std::vector<CopyRequest> r;
  for (uint32_t e = 0; e < 4; ++e) {
    append(&r, experts(0, 4, {e}));
    append(&r, experts(1, 4, {e}));
  }
  expect_per_slice(r, MergeDecision::kInterleaved);
}

TEST(CopyPlanner, MismatchedShapesAndMixedDtypesKeepPerSlice) {
  auto shapes = experts(0, 4, all(4));
  shapes[2].shape = {2, 2};
  expect_per_slice(shapes, MergeDecision::kShapeMismatch);
  auto dtypes = experts(0, 4, all(4));
  dtypes[1].dtype = DType::kI32;
  expect_per_slice(dtypes, MergeDecision::kShapeMismatch);
}

TEST(CopyPlanner, MixedListMergesOnlyTheCompleteRuns) {
  std::vector<CopyRequest> r = experts(0, 4, all(4));
  append(&r, experts(1, 4, {0, 2}));
  append(&r, experts(2, 2, all(2)));
  const CopyPlan plan = plan_copies(r);
  EXPECT_EQ(plan.transfers.size(), 1u + 2u + 1u);
  EXPECT_EQ(plan.slices[4].decision, MergeDecision::kIncomplete);
  EXPECT_EQ(plan.slices[6].decision, MergeDecision::kMerged);
  EXPECT_EQ(plan_copies(experts(3, 1, {0})).slices[0].decision, MergeDecision::kSingle);
}

}  // namespace
}  // namespace weightcast
