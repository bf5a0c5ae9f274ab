// Records of a box a tensor-parallel rank owns (EncodeOptions::slice, ApplyOptions::
// record_slice): the positions are the box's local indices, the checksums C() over the
// elements' global indices. Four owners of column and expert blocks: their records bring a
// whole tensor and every engine slice bit-exact, their checksums are the shares that add up to
// the tensor's, on_changes reports runs of global indices, and a wrong base, a wrong target or
// a destination of another size is refused with nothing written.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/delta_format.h"
#include "codec/slice_checksum.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

using testing::perturb;
using testing::random_bytes;

const std::vector<int64_t> kShape = {4, 24, 32};  // experts x rows x columns, bf16
constexpr uint64_t kElements = 4 * 24 * 32;
constexpr uint32_t kChunk = 200;  // chunks cross the boxes' rows

std::vector<uint8_t> gather(const std::vector<uint8_t>& full, const TensorSlice& s) {
  return testing::gather_slice(full, kShape, s);
}

TensorRef view_of(std::vector<uint8_t>& bytes, const std::string& name) {
  return testing::bf16_view(bytes, name);
}

// Four owners: columns 0-12 of experts 0-1, columns 12-32 of experts 0-1, rows 0-5 of experts
// 2-3, rows 5-24 of experts 2-3 (a tensor-parallel split, and an expert split with rows).
std::vector<TensorSlice> owners() {
  return {TensorSlice::box({0, 0, 0}, {2, 24, 12}), TensorSlice::box({0, 0, 12}, {2, 24, 20}),
          TensorSlice::box({2, 0, 0}, {2, 5, 32}), TensorSlice::box({2, 5, 0}, {2, 19, 32})};
}

struct BoxRecord {
  ShapedSlice box;
  EncodedDelta delta;
  std::map<uint64_t, uint64_t> reported;  // on_changes: global index -> new bits
};

BoxRecord encode_box(const std::vector<uint8_t>& old_full, const std::vector<uint8_t>& new_full,
                     const TensorSlice& box) {
  BoxRecord out;
  out.box = {kShape, box};
  std::vector<uint8_t> old_own = gather(old_full, box), new_own = gather(new_full, box);
  EncodeOptions o;
  o.name = "experts.w1";
  o.chunk_elements = kChunk;
  o.slice = &out.box;
  o.on_changes = [&](uint64_t first, const uint32_t* positions, uint32_t n, const uint8_t*,
                     const uint8_t* new_chunk) {
    for (uint32_t k = 0; k < n; ++k) {
      uint16_t v = 0;
      std::memcpy(&v, new_chunk + size_t{positions[k]} * 2, 2);
      out.reported[first + positions[k]] = v;
    }
  };
  auto enc = encode_delta(old_own, new_own, o);
  EXPECT_TRUE(enc.ok()) << enc.status().to_string();
  if (enc.ok()) out.delta = std::move(*enc);
  return out;
}

class DeltaBoxRecord : public ::testing::Test {
 protected:
  void SetUp() override {
    old_full_ = random_bytes(kElements * 2, 41);
    new_full_ = perturb(old_full_, 2, 0.05, 42);
    const std::vector<uint8_t> dense = random_bytes(kChunk * 2, 43);  // a raw chunk too
    std::memcpy(new_full_.data() + 64 * 2, dense.data(), dense.size());
    for (const TensorSlice& box : owners())
      records_.push_back(encode_box(old_full_, new_full_, box));
  }
  std::vector<uint8_t> old_full_, new_full_;
  std::vector<BoxRecord> records_;
};

TEST_F(DeltaBoxRecord, ChecksumsAreGlobalSharesAndChangesAreReportedAtGlobalIndices) {
  uint64_t base = 0, target = 0;
  std::map<uint64_t, uint64_t> changed;
  for (const BoxRecord& r : records_) {
    const DeltaRecordHeader& h = r.delta.header;
    EXPECT_EQ(h.range_offset, 0u);
    EXPECT_EQ(h.range_elements, slice_elements(kShape, r.box.slice));
    EXPECT_EQ(h.tensor_elements, kElements);
    base += h.base_checksum;
    target += h.target_checksum;
    changed.insert(r.reported.begin(), r.reported.end());
  }
  EXPECT_EQ(base, checksum_range(old_full_.data(), 2, kElements, 0));
  EXPECT_EQ(target, checksum_range(new_full_.data(), 2, kElements, 0));
  std::map<uint64_t, uint64_t> expected;
  for (uint64_t g = 0; g < kElements; ++g) {
    uint16_t was = 0, now = 0;
    std::memcpy(&was, old_full_.data() + g * 2, 2);
    std::memcpy(&now, new_full_.data() + g * 2, 2);
    if (was != now) expected[g] = now;
  }
  EXPECT_GT(expected.size(), 100u);
  EXPECT_EQ(changed, expected);
}

TEST_F(DeltaBoxRecord, TheOwnersRecordsBringAWholeTensorToTheNewVersionAndRevert) {
  std::vector<uint8_t> held = old_full_;
  std::vector<ApplyUndo> undo(records_.size());
  for (size_t k = 0; k < records_.size(); ++k) {
    auto view = parse_delta_record(records_[k].delta.record);
    ASSERT_TRUE(view.ok()) << view.status().to_string();
    ApplyOptions o;
    o.record_slice = &records_[k].box;
    o.undo = &undo[k];
    auto applied = apply_delta(*view, view_of(held, "w1"), o);  // base computed from `held`
    ASSERT_TRUE(applied.ok()) << applied.status().to_string();
    EXPECT_EQ(applied->checksum, view->header.target_checksum);
  }
  EXPECT_EQ(held, new_full_);
  for (size_t k = records_.size(); k-- > 0;) {
    auto view = parse_delta_record(records_[k].delta.record);
    ApplyOptions o;
    o.record_slice = &records_[k].box;
    ASSERT_TRUE(revert_delta(*view, view_of(held, "w1"), undo[k], o).ok());
  }
  EXPECT_EQ(held, old_full_);
}

TEST_F(DeltaBoxRecord, EverySliceOfEveryLayoutTakesItsElementsFromTheRecordsItMeets) {
  const std::vector<std::vector<TensorSlice>> layouts = {
      {*TensorSlice::split(kShape, 1, 2, 0), *TensorSlice::split(kShape, 1, 2, 1)},
      {*TensorSlice::split(kShape, 2, 2, 0), *TensorSlice::split(kShape, 2, 2, 1)},
      {*TensorSlice::split(kShape, 0, 4, 1), *TensorSlice::split(kShape, 0, 4, 3)},
      {TensorSlice::flat(100, 1900)}};
  std::vector<uint8_t> new_copy = new_full_;
  for (const auto& layout : layouts) {
    const auto targets =
        *partial_checksums(view_of(new_copy, "w1"), kShape, TensorSlice::whole(kShape), layout);
    for (size_t s = 0; s < layout.size(); ++s) {
      SliceDestination where{kShape, layout[s]};
      std::vector<uint8_t> held = gather(old_full_, layout[s]);
      const std::vector<uint8_t> held_old = held;
      uint64_t sum = 0;
      for (const BoxRecord& r : records_) {
        auto view = parse_delta_record(r.delta.record);
        ApplyOptions o;
        o.record_slice = &r.box;
        o.dest_slice = &where;
        o.caller_verifies = true;
        auto applied = apply_delta(*view, view_of(held, "w1"), o);
        ASSERT_TRUE(applied.ok()) << applied.status().to_string();
        sum += applied->checksum;
      }
      std::vector<uint8_t> old_copy = old_full_;
      const uint64_t base = (*partial_checksums(view_of(old_copy, "w1"), kShape,
                                                TensorSlice::whole(kShape), {layout[s]}))[0];
      EXPECT_EQ(base + sum, targets[s]) << describe_slice(layout[s]);
      EXPECT_EQ(held, gather(new_full_, layout[s])) << describe_slice(layout[s]);
      EXPECT_NE(held, held_old);
    }
  }
}

TEST_F(DeltaBoxRecord, AWrongBaseOrTargetOrDestinationIsRefusedWithNothingWritten) {
  const BoxRecord& r = records_[1];
  auto view = parse_delta_record(r.delta.record);
  ASSERT_TRUE(view.ok());
  std::vector<uint8_t> held = old_full_;
  ApplyOptions o;
  o.record_slice = &r.box;
  o.current_checksum = view->header.base_checksum + 1;
  auto wrong_base = apply_delta(*view, view_of(held, "w1"), o);
  ASSERT_FALSE(wrong_base.ok());
  EXPECT_EQ(wrong_base.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(held, old_full_);
  // Another version's bytes in the box: the base computed from them is refused.
  std::vector<uint8_t> other = old_full_;
  other[2 * 12 + 1] ^= 0x40;  // element [0, 0, 12], inside the box
  held = other;
  o.current_checksum.reset();
  auto other_base = apply_delta(*view, view_of(held, "w1"), o);
  ASSERT_FALSE(other_base.ok());
  EXPECT_EQ(other_base.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(held, other);
  // A wrong target: the changes are reverted.
  held = old_full_;
  DeltaRecordView wrong_target = *view;
  wrong_target.header.target_checksum += 1;
  auto missed = apply_delta(wrong_target, view_of(held, "w1"), o);
  ASSERT_FALSE(missed.ok());
  EXPECT_EQ(missed.status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(held, old_full_);
  std::vector<uint8_t> short_dest(old_full_.begin(), old_full_.begin() + 1000);
  auto wrong_size = apply_delta(*view, view_of(short_dest, "w1 shard"), o);
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_NE(wrong_size.status().message().find("'w1 shard' holds 500"), std::string::npos)
      << wrong_size.status().message();
  const ShapedSlice other_box{kShape, TensorSlice::box({0, 0, 0}, {2, 24, 12})};
  o.record_slice = &other_box;
  auto wrong_box = apply_delta(*view, view_of(held, "w1"), o);
  ASSERT_FALSE(wrong_box.ok());
  EXPECT_NE(wrong_box.status().message().find("not slice [0:2, 0:24, 0:12]"), std::string::npos)
      << wrong_box.status().message();
}

}  // namespace
}  // namespace weightcast
