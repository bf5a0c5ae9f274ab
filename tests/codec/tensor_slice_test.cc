// Slices of a tensor (codec/tensor_slice.h): runs, local indices and shared elements against
// a brute-force walk of the global index space, and the tiling check's refusals by name.
#include "codec/tensor_slice.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <vector>

namespace weightcast {
namespace {

// Every global index the slice holds, in local order, by walking the whole tensor.
std::vector<uint64_t> brute_force(const std::vector<int64_t>& shape, const TensorSlice& s) {
  uint64_t n = 1;
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  std::vector<uint64_t> held;
  for (uint64_t g = 0; g < n; ++g) {
    if (s.kind == TensorSlice::Kind::kFlat) {
      if (g >= s.begin && g < s.end) held.push_back(g);
      continue;
    }
    uint64_t rest = g, stride = n;
    bool inside = true;
    for (size_t e = 0; e < shape.size(); ++e) {
      stride /= static_cast<uint64_t>(shape[e]);
      const auto at = static_cast<int64_t>(rest / stride);
      rest %= stride;
      inside = inside && at >= s.offsets[e] && at < s.offsets[e] + s.sizes[e];
    }
    if (inside) held.push_back(g);
  }
  return held;
}

// The slice's global indices in local order, from its runs.
std::vector<uint64_t> from_runs(const std::vector<int64_t>& shape, const TensorSlice& s) {
  std::vector<uint64_t> held;
  for_each_slice_run(shape, s, [&](const SliceRun& r) {
    EXPECT_GT(r.count, 0u);
    EXPECT_EQ(r.local, held.size());
    for (uint64_t k = 0; k < r.count; ++k) held.push_back(r.global + k);
    return true;
  });
  return held;
}

TensorSlice random_box(std::mt19937& rng, const std::vector<int64_t>& shape) {
  std::vector<int64_t> offsets, sizes;
  for (const int64_t d : shape) {
    const int64_t off = std::uniform_int_distribution<int64_t>(0, d - 1)(rng);
    offsets.push_back(off);
    sizes.push_back(std::uniform_int_distribution<int64_t>(1, d - off)(rng));
  }
  return TensorSlice::box(offsets, sizes);
}

TEST(TensorSlice, SplitCutsAsTensorSplitDoes) {
  const std::vector<int64_t> shape = {10, 4};
  std::vector<int64_t> offsets, sizes;
  for (int64_t i = 0; i < 3; ++i) {
    auto s = TensorSlice::split(shape, 0, 3, i);
    ASSERT_TRUE(s.ok()) << s.status().message();
    offsets.push_back(s->offsets[0]);
    sizes.push_back(s->sizes[0]);
    EXPECT_EQ(s->offsets[1], 0);
    EXPECT_EQ(s->sizes[1], 4);
  }
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 4, 7}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 3, 3}));
  EXPECT_FALSE(TensorSlice::split(shape, 2, 2, 0).ok());
  EXPECT_FALSE(TensorSlice::split(shape, 0, 2, 2).ok());
  EXPECT_FALSE(TensorSlice::split(shape, 0, 0, 0).ok());
}

TEST(TensorSlice, RunsMergeRowsThatSpanWholeInnerDimensions) {
  const std::vector<int64_t> shape = {4, 4};
  std::vector<SliceRun> runs;
  const auto collect = [&](const TensorSlice& s) {
    runs.clear();
    for_each_slice_run(shape, s, [&](const SliceRun& r) {
      runs.push_back(r);
      return true;
    });
  };
  collect(TensorSlice::box({1, 0}, {2, 4}));  // rows 1-2: one run
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].global, 4u);
  EXPECT_EQ(runs[0].count, 8u);
  collect(TensorSlice::box({0, 1}, {4, 2}));  // columns 1-2: a run a row
  ASSERT_EQ(runs.size(), 4u);
  for (uint64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(runs[r].global, 4 * r + 1);
    EXPECT_EQ(runs[r].local, 2 * r);
    EXPECT_EQ(runs[r].count, 2u);
  }
  collect(TensorSlice::box({0, 0}, {0, 4}));
  EXPECT_TRUE(runs.empty());
}

TEST(TensorSlice, RunsLocalIndicesAndSharedElementsMatchABruteForceWalk) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> shape;
    const int dims = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int e = 0; e < dims; ++e)
      shape.push_back(std::uniform_int_distribution<int64_t>(1, 6)(rng));
    uint64_t n = 1;
    for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
    const uint64_t b = std::uniform_int_distribution<uint64_t>(0, n)(rng);
    const TensorSlice slices[] = {
        random_box(rng, shape), random_box(rng, shape),
        TensorSlice::flat(b, std::uniform_int_distribution<uint64_t>(b, n)(rng))};
    for (const TensorSlice& s : slices) {
      ASSERT_TRUE(check_slice("t", shape, s).ok());
      const std::vector<uint64_t> expected = brute_force(shape, s);
      ASSERT_EQ(from_runs(shape, s), expected) << describe_slice(s);
      ASSERT_EQ(slice_elements(shape, s), expected.size());
      // Clipped to a window of global indices.
      const uint64_t lo = std::uniform_int_distribution<uint64_t>(0, n)(rng);
      const uint64_t hi = std::uniform_int_distribution<uint64_t>(lo, n)(rng);
      std::vector<uint64_t> window;
      for (const uint64_t g : expected) {
        if (g >= lo && g < hi) window.push_back(g);
      }
      std::vector<uint64_t> clipped;
      for_each_slice_run(shape, s, lo, hi, [&](const SliceRun& r) {
        for (uint64_t k = 0; k < r.count; ++k) {
          clipped.push_back(r.global + k);
          EXPECT_EQ(expected[r.local + k], r.global + k);
        }
        return true;
      });
      ASSERT_EQ(clipped, window) << describe_slice(s) << " in [" << lo << ", " << hi << ")";
      // Local indices, for every global index.
      const SliceLocator at(shape, s);
      for (uint64_t g = 0, k = 0; g < n; ++g) {
        const auto local = at.local(g);
        if (k < expected.size() && expected[k] == g) {
          ASSERT_TRUE(local.has_value()) << describe_slice(s) << " element " << g;
          ASSERT_EQ(*local, k++);
        } else {
          ASSERT_FALSE(local.has_value()) << describe_slice(s) << " element " << g;
        }
      }
    }
    // Shared elements of two slices.
    const std::vector<uint64_t> a = brute_force(shape, slices[0]),
                                c = brute_force(shape, slices[2]);
    std::vector<uint64_t> both;
    std::set_intersection(a.begin(), a.end(), c.begin(), c.end(), std::back_inserter(both));
    std::vector<uint64_t> shared;
    for_each_shared_run(shape, slices[0], slices[2], [&](const SharedRun& r) {
      for (uint64_t k = 0; k < r.count; ++k) {
        shared.push_back(r.global + k);
        EXPECT_EQ(a[r.local_a + k], r.global + k);
        EXPECT_EQ(c[r.local_b + k], r.global + k);
      }
      return true;
    });
    ASSERT_EQ(shared, both);
  }
}

TEST(TensorSlice, CheckSliceRefusesSlicesOutsideTheTensorByName) {
  const std::vector<int64_t> shape = {8, 4};
  const Status rank = check_slice("w", shape, TensorSlice::box({0}, {8}));
  EXPECT_NE(rank.message().find("tensor 'w' [8, 4]"), std::string::npos) << rank.message();
  EXPECT_NE(rank.message().find("1 dimensions"), std::string::npos) << rank.message();
  const Status out = check_slice("w", shape, TensorSlice::box({6, 0}, {4, 4}));
  EXPECT_NE(out.message().find("[6:10, 0:4] leaves the tensor along dimension 0"),
            std::string::npos)
      << out.message();
  EXPECT_FALSE(check_slice("w", shape, TensorSlice::box({-1, 0}, {1, 4})).ok());
  EXPECT_FALSE(check_slice("w", shape, TensorSlice::flat(30, 33)).ok());
  EXPECT_FALSE(check_slice("w", shape, TensorSlice::flat(5, 4)).ok());
  EXPECT_TRUE(check_slice("w", shape, TensorSlice::flat(32, 32)).ok());
  // Malformed boxes from a manifest are named, not read past their ends.
  const Status lengths = check_slice("w", shape, TensorSlice::box({0, 0}, {8}));
  EXPECT_NE(lengths.message().find("offsets [0, 0] sizes [8]"), std::string::npos)
      << lengths.message();
  const Status huge = check_slice("w", shape, TensorSlice::box({INT64_MAX, 0}, {INT64_MAX, 4}));
  EXPECT_NE(huge.message().find(":+9223372036854775807, 0:4] leaves the tensor"), std::string::npos)
      << huge.message();
}

RankSlice owned(uint32_t rank, TensorSlice slice, std::vector<int64_t> shape = {8, 6},
                DType dtype = DType::kBF16) {
  return {rank, std::move(shape), dtype, std::move(slice)};
}

TEST(TensorSlice, TilingAcceptsFsdpRangesAndTensorParallelBlocks) {
  // Four uneven flat ranges crossing rows.
  EXPECT_TRUE(
      check_tiling("w", {owned(0, TensorSlice::flat(0, 7)), owned(1, TensorSlice::flat(7, 20)),
                         owned(3, TensorSlice::flat(41, 48)), owned(2, TensorSlice::flat(20, 41))})
          .ok());
  for (int64_t dim = 0; dim < 2; ++dim) {
    std::vector<RankSlice> tp;
    for (int64_t i = 0; i < 4; ++i) tp.push_back(owned(i, *TensorSlice::split({8, 6}, dim, 4, i)));
    EXPECT_TRUE(check_tiling("w", tp).ok()) << "dim " << dim;
  }
  // A mix of a box and flat ranges.
  EXPECT_TRUE(
      check_tiling("w", {owned(0, TensorSlice::box({0, 0}, {4, 6})),
                         owned(1, TensorSlice::flat(24, 30)), owned(2, TensorSlice::flat(30, 48))})
          .ok());
}

TEST(TensorSlice, TilingRefusesOverlapsHolesAndDisagreementsNamingTheRanks) {
  const Status overlap = check_tiling(
      "model.layers.0.mlp.down_proj.weight",
      {owned(0, TensorSlice::box({0, 0}, {8, 4})), owned(5, TensorSlice::box({0, 3}, {8, 3}))});
  EXPECT_NE(overlap.message().find("'model.layers.0.mlp.down_proj.weight'"), std::string::npos);
  EXPECT_NE(overlap.message().find("rank 0 ([0:8, 0:4]) and rank 5 ([0:8, 3:6]) overlap at "
                                   "element [0, 3]"),
            std::string::npos)
      << overlap.message();
  const Status flat_overlap = check_tiling(
      "w", {owned(1, TensorSlice::flat(0, 20)), owned(2, TensorSlice::box({3, 0}, {5, 6}))});
  EXPECT_NE(flat_overlap.message().find("overlap at element [3, 0]"), std::string::npos)
      << flat_overlap.message();
  const Status hole =
      check_tiling("w", {owned(0, TensorSlice::flat(0, 7)), owned(1, TensorSlice::flat(9, 48))});
  EXPECT_NE(hole.message().find("no rank holds element [1, 1] (the slices hold 46 of its 48"),
            std::string::npos)
      << hole.message();
  const Status shape = check_tiling(
      "w", {owned(0, TensorSlice::flat(0, 24)), owned(3, TensorSlice::flat(24, 48), {6, 8})});
  EXPECT_NE(shape.message().find("rank 0 declares bf16 [8, 6] but rank 3 declares bf16 [6, 8]"),
            std::string::npos)
      << shape.message();
  const Status dtype =
      check_tiling("w", {owned(0, TensorSlice::flat(0, 24)),
                         owned(2, TensorSlice::flat(24, 48), {8, 6}, DType::kF32)});
  EXPECT_NE(dtype.message().find("but rank 2 declares f32 [8, 6]"), std::string::npos)
      << dtype.message();
  const Status outside = check_tiling("w", {owned(4, TensorSlice::flat(0, 50))});
  EXPECT_NE(outside.message().find("rank 4: "), std::string::npos) << outside.message();
  EXPECT_FALSE(check_tiling("w", {}).ok());
}

}  // namespace
}  // namespace weightcast
