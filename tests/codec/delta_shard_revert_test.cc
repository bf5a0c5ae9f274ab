// A version applied all or nothing into a tensor-parallel rank's shards (codec/delta_apply.h):
// when a later record fails, revert_delta brings every earlier destination back. The journal
// reader only registers whole tensors (transport/fs/catch_up_apply.cc reverts those), so the
// shard layouts are held to it here: a record of a range of a tensor (range_offset > 0) and the
// part of a whole-tensor record one rank holds (dest_first_element with part checksums, chunks
// cut at both ends), in contiguous memory and as a strided view of a fused allocation. Each
// must be byte-identical to before, and the bytes around it in its allocation never written.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "tests/codec/cuda_test_util.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::perturb;
using testing::random_bytes;

constexpr uint32_t kChunk = 1024;
constexpr size_t kTargetChecksumOffset = 64;  // docs/FORMATS.md, record header

// One record of the version and where this rank applies it.
struct Step {
  std::vector<uint8_t> record;
  TensorRef dest;
  ApplyOptions options;
  ApplyUndo undo;
};

struct VersionOutcome {
  Status failure;      // the first record that failed
  Status reverted;     // the first revert that failed
  size_t applied = 0;  // records applied before the failure
};

// What the journal reader does with a version (catch_up_apply.cc), for these destinations: the
// records in order, each with its undo; at the first failure, `before_revert` runs and the ones
// applied are reverted, last first, with the options they were applied with.
VersionOutcome apply_version(std::vector<Step>& steps, const std::function<void()>& before_revert) {
  VersionOutcome out;
  std::vector<DeltaRecordView> views;
  for (Step& s : steps) {
    auto view = parse_delta_record(s.record);
    EXPECT_TRUE(view.ok()) << view.status().to_string();
    if (!view.ok()) return {view.status(), ok_status(), 0};
    views.push_back(std::move(*view));
  }
  for (; out.applied < steps.size(); ++out.applied) {
    Step& s = steps[out.applied];
    s.undo = {};
    s.options.undo = &s.undo;
    auto r = apply_delta(views[out.applied], s.dest, s.options);
    if (!r.ok()) {
      out.failure = r.status();
      break;
    }
  }
  if (out.failure.ok()) return out;
  before_revert();
  for (size_t k = out.applied; k-- > 0;) {
    Status s = revert_delta(views[k], steps[k].dest, steps[k].undo, steps[k].options);
    if (!s.ok() && out.reverted.ok()) out.reverted = s;
  }
  return out;
}

std::vector<uint8_t> encode_range(const std::vector<uint8_t>& old_bytes,
                                  const std::vector<uint8_t>& new_bytes, const std::string& name,
                                  uint64_t range_offset, uint64_t tensor_elements, uint32_t modes) {
  EncodeOptions o;
  o.name = name;
  o.dtype = DType::kBF16;
  o.chunk_elements = kChunk;
  o.allowed_modes = modes;
  o.base_version = 4;
  o.target_version = 5;
  o.range_offset = range_offset;
  o.tensor_elements = tensor_elements;
  auto enc = encode_delta(old_bytes, new_bytes, o);
  EXPECT_TRUE(enc.ok()) << enc.status().to_string();
  return enc.ok() ? enc->record : std::vector<uint8_t>{};
}

std::vector<uint8_t> slice(const std::vector<uint8_t>& bf16, size_t first, size_t count) {
  return {bf16.begin() + first * 2, bf16.begin() + (first + count) * 2};
}

enum class Cause { kTargetMismatch, kWrongBase };

struct Case {
  const char* name;
  Cause cause;
  uint32_t modes;  // raw chunks revert from their undo, the others by subtraction
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class DeltaShardRevert : public ::testing::TestWithParam<Case> {};

TEST_P(DeltaShardRevert, AFailedVersionLeavesEveryShardAndItsNeighboursAsBefore) {
  const Case c = GetParam();
  constexpr size_t kGuard = 300;  // elements of other tensors around a shard in its allocation
  std::vector<Step> steps(4);

  // 1. Rank 1 of a row-split tensor of 10000 elements: a record of its range [4321, 10000).
  const size_t n1 = 10000, cut = 4321;
  const auto old1 = random_bytes(n1 * 2, 61), new1 = perturb(old1, 2, 0.3, 62);
  std::vector<uint8_t> arena1 = random_bytes((kGuard + n1 - cut + kGuard) * 2, 63);
  std::memcpy(arena1.data() + kGuard * 2, old1.data() + cut * 2, (n1 - cut) * 2);
  steps[0].record = encode_range(slice(old1, cut, n1 - cut), slice(new1, cut, n1 - cut), "o_proj",
                                 cut, n1, c.modes);
  steps[0].dest = TensorRef::contiguous("o_proj[4321:]", DType::kBF16, arena1.data() + kGuard * 2,
                                        static_cast<int64_t>(n1 - cut));

  // 2. Elements [1500, 6700) of a whole-tensor record of 9000, contiguous: part checksums.
  const size_t n2 = 9000, a2 = 1500, b2 = 6700;
  const auto old2 = random_bytes(n2 * 2, 64), new2 = perturb(old2, 2, 0.3, 65);
  std::vector<uint8_t> arena2 = random_bytes((kGuard + b2 - a2 + kGuard) * 2, 66);
  std::memcpy(arena2.data() + kGuard * 2, old2.data() + a2 * 2, (b2 - a2) * 2);
  steps[1].record = encode_range(old2, new2, "down_proj", 0, 0, c.modes);
  steps[1].dest = TensorRef::contiguous("down_proj[1500:6700]", DType::kBF16,
                                        arena2.data() + kGuard * 2, static_cast<int64_t>(b2 - a2));
  steps[1].options.dest_first_element = a2;
  steps[1].options.part_base_checksum = checksum_range(old2.data() + a2 * 2, 2, b2 - a2, a2);
  steps[1].options.part_target_checksum = checksum_range(new2.data() + a2 * 2, 2, b2 - a2, a2);

  // 3. Rows [17, 83) of k ([96, 64]) inside the rank's fused qkv allocation [66, 192]: a
  // strided view (columns 64..127) of a part of a whole-tensor record.
  const int64_t R = 96, H = 64, r0 = 17, r1 = 83;
  const auto old3 = random_bytes(R * H * 2, 67), new3 = perturb(old3, 2, 0.3, 68);
  std::vector<uint8_t> fused = random_bytes((r1 - r0) * 3 * H * 2, 69);
  for (int64_t r = r0; r < r1; ++r) {
    std::memcpy(fused.data() + ((r - r0) * 3 * H + H) * 2, old3.data() + r * H * 2, H * 2);
  }
  steps[2].record = encode_range(old3, new3, "qkv.k", 0, 0, c.modes);
  TensorRef k;
  k.name = "qkv.k rows [17, 83)";
  k.dtype = DType::kBF16;
  k.shape = {r1 - r0, H};
  k.strides = {3 * H, 1};
  k.offset = H;
  k.data = fused.data();
  steps[2].dest = k;
  steps[2].options.dest_first_element = r0 * H;
  steps[2].options.part_base_checksum =
      checksum_range(old3.data() + r0 * H * 2, 2, (r1 - r0) * H, r0 * H);
  steps[2].options.part_target_checksum =
      checksum_range(new3.data() + r0 * H * 2, 2, (r1 - r0) * H, r0 * H);

  // 4. The record that fails: a target its changes do not reach, or a destination that holds
  // another version than the record's base.
  const size_t n4 = 5000;
  const auto old4 = random_bytes(n4 * 2, 70), new4 = perturb(old4, 2, 0.3, 71);
  steps[3].record = encode_range(old4, new4, "lm_head", 0, 0, c.modes);
  std::vector<uint8_t> victim = old4;
  if (c.cause == Cause::kTargetMismatch) {
    steps[3].record[kTargetChecksumOffset] ^= 1;
    testing::reseal(&steps[3].record);
  } else {
    victim = perturb(old4, 2, 0.001, 72);
  }
  steps[3].dest =
      TensorRef::contiguous("lm_head", DType::kBF16, victim.data(), static_cast<int64_t>(n4));

  const auto before1 = arena1, before2 = arena2, before3 = fused, before4 = victim;
  const auto guards_equal = [&](const std::vector<uint8_t>& now, const std::vector<uint8_t>& was,
                                size_t count) {
    return std::memcmp(now.data(), was.data(), kGuard * 2) == 0 &&
           std::memcmp(now.data() + (kGuard + count) * 2, was.data() + (kGuard + count) * 2,
                       kGuard * 2) == 0;
  };
  const VersionOutcome out = apply_version(steps, [&] {
    // The shards were written (the revert has work to do), nothing around them.
    EXPECT_TRUE(arena1 != before1 && guards_equal(arena1, before1, n1 - cut));
    EXPECT_TRUE(arena2 != before2 && guards_equal(arena2, before2, b2 - a2));
    EXPECT_NE(fused, before3);
    for (int64_t r = 0; r < r1 - r0; ++r) {
      for (const int64_t col : {int64_t{0}, 2 * H}) {  // q and v of the row
        const size_t at = static_cast<size_t>(r * 3 * H + col) * 2;
        EXPECT_EQ(std::memcmp(fused.data() + at, before3.data() + at, H * 2), 0) << r << "," << col;
      }
    }
  });
  ASSERT_FALSE(out.failure.ok());
  EXPECT_EQ(out.failure.code(), c.cause == Cause::kTargetMismatch ? StatusCode::kChecksumMismatch
                                                                  : StatusCode::kFailedPrecondition)
      << out.failure.to_string();
  EXPECT_NE(out.failure.message().find("lm_head"), std::string::npos) << out.failure.to_string();
  EXPECT_EQ(out.applied, 3u);
  ASSERT_TRUE(out.reverted.ok()) << out.reverted.to_string();
  EXPECT_TRUE(arena1 == before1) << "the range record's shard or its neighbours changed";
  EXPECT_TRUE(arena2 == before2) << "the contiguous part or its neighbours changed";
  EXPECT_TRUE(fused == before3) << "the strided part or q and v beside it changed";
  EXPECT_TRUE(victim == before4) << "the failing record left its destination changed";

  // The reverted shards hold their base again: the good records apply on them as on a first try.
  std::vector<Step> good(steps.begin(), steps.begin() + 3);
  const VersionOutcome again = apply_version(good, [] {});
  ASSERT_TRUE(again.failure.ok()) << again.failure.to_string();
  EXPECT_EQ(std::memcmp(arena1.data() + kGuard * 2, new1.data() + cut * 2, (n1 - cut) * 2), 0);
  EXPECT_EQ(std::memcmp(arena2.data() + kGuard * 2, new2.data() + a2 * 2, (b2 - a2) * 2), 0);
  for (int64_t r = r0; r < r1; ++r) {
    EXPECT_EQ(
        std::memcmp(fused.data() + ((r - r0) * 3 * H + H) * 2, new3.data() + r * H * 2, H * 2), 0)
        << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Causes, DeltaShardRevert,
    ::testing::Values(Case{"target_mismatch", Cause::kTargetMismatch, kAllowAllModes},
                      Case{"target_mismatch_raw", Cause::kTargetMismatch, kAllowRaw},
                      Case{"wrong_base", Cause::kWrongBase, kAllowAllModes},
                      Case{"wrong_base_raw", Cause::kWrongBase, kAllowRaw}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace weightcast
