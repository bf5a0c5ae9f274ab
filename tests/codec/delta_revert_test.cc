// Undoing a successful apply (revert_delta, codec/delta_apply.h), which a subscriber needs
// when a later tensor of the same version fails: after apply + revert the destination holds
// its old bytes again, for records of differences and of raw chunks, contiguous and strided,
// serial and on a pool, in host and (on a GPU) CUDA memory; a raw chunk whose undo is missing
// is refused instead of half reverted.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/delta_chunk.h"
#include "tests/codec/chunk_mode_check.h"
#include "tests/codec/cuda_test_util.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::encode;
using testing::perturb;
using testing::random_bytes;
using testing::view_of;

struct Case {
  double density;
  uint32_t modes;
  bool expect_raw;
};

class DeltaRevert : public ::testing::TestWithParam<Case> {};

TEST_P(DeltaRevert, ApplyThenRevertRestoresTheOldBytes) {
  const Case c = GetParam();
  const auto old_bytes = random_bytes(50000 * 2, 7);
  const auto new_bytes = perturb(old_bytes, 2, c.density, 8);
  auto enc = encode(old_bytes, new_bytes, DType::kBF16, 4096, c.modes);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok());
  testing::expect_chunk_modes(*enc, *rec, old_bytes, new_bytes, c.modes);
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    std::vector<uint8_t> dest = old_bytes;
    ApplyUndo undo;
    ApplyOptions o;
    o.pool = p;
    o.undo = &undo;
    auto applied = apply_delta(*rec, view_of(dest, DType::kBF16), o);
    ASSERT_TRUE(applied.ok()) << applied.status().to_string();
    ASSERT_EQ(dest, new_bytes);
    EXPECT_EQ(!undo.raw.empty(), c.expect_raw);
    ASSERT_TRUE(revert_delta(*rec, view_of(dest, DType::kBF16), undo, o).ok());
    EXPECT_EQ(dest, old_bytes) << "pool " << (p != nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, DeltaRevert,
                         ::testing::Values(Case{0.01, kAllowAllModes, false},
                                           Case{0.9, kAllowAllModes, false},
                                           Case{0.05, kAllowBitmap, false},
                                           Case{0.9, kAllowRaw, true},
                                           Case{0.02, kAllowRaw, true}));

TEST(DeltaRevertViews, AStridedSliceOfAPackedParameterIsRevertedAndItsNeighboursUntouched) {
  const int64_t R = 64, C = 96, H = 48;  // the slice: columns 48..95 of a [64, 96] parameter
  auto packed = random_bytes(R * C * 2, 11);
  std::vector<uint8_t> slice_old(R * H * 2);
  for (int64_t r = 0; r < R; ++r) {
    std::memcpy(slice_old.data() + r * H * 2, packed.data() + (r * C + H) * 2, H * 2);
  }
  const auto slice_new = perturb(slice_old, 2, 0.6, 12);
  auto enc = encode(slice_old, slice_new, DType::kBF16, 1024);
  ASSERT_TRUE(enc.ok());
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok());
  TensorRef view;
  view.name = "gate_up_proj.up";
  view.dtype = DType::kBF16;
  view.shape = {R, H};
  view.strides = {C, 1};
  view.offset = H;
  view.data = packed.data();
  const auto before = packed;
  ApplyUndo undo;
  ApplyOptions o;
  o.undo = &undo;
  ASSERT_TRUE(apply_delta(*rec, view, o).ok());
  ASSERT_NE(packed, before);
  ASSERT_TRUE(revert_delta(*rec, view, undo, o).ok());
  EXPECT_EQ(packed, before);
}

TEST(DeltaRevertViews, ARawChunkWithoutItsUndoIsRefused) {
  const auto old_bytes = random_bytes(8192 * 2, 13);
  const auto new_bytes = perturb(old_bytes, 2, 0.9, 14);
  auto enc = encode(old_bytes, new_bytes, DType::kBF16, 4096, kAllowRaw);
  ASSERT_TRUE(enc.ok());
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok());
  std::vector<uint8_t> dest = old_bytes;
  ApplyUndo undo;
  ApplyOptions o;
  o.undo = &undo;
  ASSERT_TRUE(apply_delta(*rec, view_of(dest, DType::kBF16), o).ok());
  ASSERT_FALSE(undo.raw.empty());
  const Status s = revert_delta(*rec, view_of(dest, DType::kBF16), ApplyUndo{}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("'t'"), std::string::npos) << s.message();
}

TEST(CudaDeltaRevert, ApplyThenRevertRestoresDeviceMemory) {
  SKIP_WITHOUT_GPU();
#if WEIGHTCAST_HAVE_CUDA
  for (const uint32_t modes : {uint32_t{kAllowAllModes}, uint32_t{kAllowRaw}}) {
    const auto old_bytes = random_bytes(300000 * 2, 15);
    const auto new_bytes = perturb(old_bytes, 2, 0.05, 16);
    auto enc = encode(old_bytes, new_bytes, DType::kBF16, 4096, modes);
    ASSERT_TRUE(enc.ok());
    auto rec = parse_delta_record(enc->record);
    ASSERT_TRUE(rec.ok());
    testing::DeviceBuffer dev(old_bytes);
    ApplyUndo undo;
    ApplyOptions o;
    o.undo = &undo;
    auto applied = apply_delta(*rec, dev.view(DType::kBF16, "t"), o);
    ASSERT_TRUE(applied.ok()) << applied.status().to_string();
    ASSERT_EQ(dev.read(), new_bytes);
    EXPECT_EQ(!undo.raw.empty(), modes == kAllowRaw);
    ASSERT_TRUE(revert_delta(*rec, dev.view(DType::kBF16, "t"), undo, o).ok());
    EXPECT_EQ(dev.read(), old_bytes) << "modes " << modes;
  }
#endif
}

}  // namespace
}  // namespace weightcast
