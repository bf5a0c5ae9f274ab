// Box records of a matrix cut along the engine layouts (transport/fs/rank_cells.h): each box
// lies inside one slice of every layout, so a record applied into an engine rank's strided
// slice takes the contiguous kernels run by run (a run of the record is a run of the slice's
// memory), and a block of rows of a matrix finds its runs by division (EvenRuns). Applied into
// column blocks, row blocks, a flat range and the whole tensor, with chunks that start and end
// mid-row and a raw chunk: every destination holds the new elements of the boxes and the old
// ones elsewhere, the changes' checksums add up, and a revert restores the old ones.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/delta_format.h"
#include "codec/slice_checksum.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

const std::vector<int64_t> kShape = {12, 200};  // rows x columns, bf16
constexpr uint64_t kElements = 12 * 200;
constexpr uint32_t kChunk = 67;  // chunks start and end mid-row

// The cells of a rank holding rows 2-9 whole, cut at row 6 and columns 100 and 150: boxes.
std::vector<TensorSlice> cells() {
  std::vector<TensorSlice> out;
  for (const auto& [r0, rows] : {std::pair<int64_t, int64_t>{2, 4}, {6, 4}}) {
    for (const auto& [c0, cols] : {std::pair<int64_t, int64_t>{0, 100}, {100, 50}, {150, 50}}) {
      out.push_back(TensorSlice::box({r0, c0}, {rows, cols}));
    }
  }
  return out;
}

TEST(DeltaBoxInSlice, RecordsInsideStridedAndContiguousSlicesApplyAndRevertExactly) {
  const std::vector<uint8_t> old_full = testing::random_bytes(kElements * 2, 51);
  std::vector<uint8_t> new_full = testing::perturb(old_full, 2, 0.2, 52);
  const std::vector<uint8_t> dense = testing::random_bytes(kChunk * 2, 53);  // a raw chunk
  std::memcpy(new_full.data() + (2 * 200 + 3) * 2, dense.data(), dense.size());
  std::vector<ShapedSlice> boxes;
  std::vector<EncodedDelta> records;
  for (const TensorSlice& box : cells()) {
    boxes.push_back({kShape, box});
    EncodeOptions o;
    o.name = "w";
    o.chunk_elements = kChunk;
    o.slice = &boxes.back();
    auto enc = encode_delta(testing::gather_slice(old_full, kShape, box),
                            testing::gather_slice(new_full, kShape, box), o);
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    records.push_back(std::move(*enc));
  }
  EXPECT_TRUE(even_runs(kShape, cells()[0]).has_value());
  // What the records bring: rows 2-9 new, the rest old.
  std::vector<uint8_t> expected = old_full;
  std::memcpy(expected.data() + 400 * 2, new_full.data() + 400 * 2, 1600 * 2);
  // Column blocks holding the boxes (strided), row blocks (one run), a flat range.
  const std::vector<TensorSlice> destinations = {
      TensorSlice::box({0, 0}, {12, 100}), TensorSlice::box({0, 100}, {12, 100}),
      TensorSlice::box({2, 0}, {4, 200}), TensorSlice::box({6, 0}, {6, 200}),
      TensorSlice::flat(400, 2000)};
  for (const TensorSlice& dest : destinations) {
    SliceDestination where{kShape, dest};
    std::vector<uint8_t> held = testing::gather_slice(old_full, kShape, dest);
    const std::vector<uint8_t> was = held;
    std::vector<ApplyUndo> undo(records.size());
    uint64_t sum = 0;
    for (size_t k = 0; k < records.size(); ++k) {
      if (!slices_meet(kShape, dest, boxes[k].slice)) continue;
      EXPECT_TRUE(slice_holds_box(kShape, dest, boxes[k].slice)) << describe_slice(dest);
      auto view = parse_delta_record(records[k].record);
      ASSERT_TRUE(view.ok());
      ApplyOptions o;
      o.record_slice = &boxes[k];
      o.dest_slice = &where;
      o.caller_verifies = true;
      o.undo = &undo[k];
      auto applied = apply_delta(*view, testing::bf16_view(held, "w"), o);
      ASSERT_TRUE(applied.ok()) << applied.status().to_string();
      sum += applied->checksum;
    }
    EXPECT_EQ(held, testing::gather_slice(expected, kShape, dest)) << describe_slice(dest);
    std::vector<uint8_t> old_copy = old_full, new_copy = expected;
    const auto base = *partial_checksums(testing::bf16_view(old_copy, "w"), kShape,
                                         TensorSlice::whole(kShape), {dest});
    const auto target = *partial_checksums(testing::bf16_view(new_copy, "w"), kShape,
                                           TensorSlice::whole(kShape), {dest});
    EXPECT_EQ(base[0] + sum, target[0]) << describe_slice(dest);
    for (size_t k = records.size(); k-- > 0;) {
      if (!slices_meet(kShape, dest, boxes[k].slice)) continue;
      auto view = parse_delta_record(records[k].record);
      ApplyOptions o;
      o.record_slice = &boxes[k];
      o.dest_slice = &where;
      ASSERT_TRUE(revert_delta(*view, testing::bf16_view(held, "w"), undo[k], o).ok());
    }
    EXPECT_EQ(held, was) << describe_slice(dest);
  }
  // The whole tensor takes the records too (rows found by division), and reverts.
  std::vector<uint8_t> whole = old_full;
  std::vector<ApplyUndo> undo(records.size());
  for (size_t k = 0; k < records.size(); ++k) {
    auto view = parse_delta_record(records[k].record);
    ApplyOptions o;
    o.record_slice = &boxes[k];
    o.undo = &undo[k];
    auto applied = apply_delta(*view, testing::bf16_view(whole, "w"), o);
    ASSERT_TRUE(applied.ok()) << applied.status().to_string();
  }
  EXPECT_EQ(whole, expected);
  for (size_t k = records.size(); k-- > 0;) {
    auto view = parse_delta_record(records[k].record);
    ApplyOptions o;
    o.record_slice = &boxes[k];
    ASSERT_TRUE(revert_delta(*view, testing::bf16_view(whole, "w"), undo[k], o).ok());
  }
  EXPECT_EQ(whole, old_full);
}

TEST(DeltaBoxInSlice, ABlockOfRowsEncodesTheSameWhenItsBaseIsKnown) {
  // With base_checksum given the encoder visits only the rows holding changes (EvenRuns);
  // without it, every row (it sums the base too). Same record, same changes reported.
  const std::vector<uint8_t> old_full = testing::random_bytes(kElements * 2, 61);
  const std::vector<uint8_t> new_full = testing::perturb(old_full, 2, 0.05, 62);
  for (const TensorSlice& box : cells()) {
    const ShapedSlice shaped{kShape, box};
    const auto old_own = testing::gather_slice(old_full, kShape, box);
    const auto new_own = testing::gather_slice(new_full, kShape, box);
    std::vector<EncodedDelta> records;
    std::vector<std::vector<uint64_t>> reported(2);
    for (int known = 0; known < 2; ++known) {
      EncodeOptions o;
      o.name = "w";
      o.chunk_elements = kChunk;
      o.slice = &shaped;
      if (known == 1) o.base_checksum = records[0].header.base_checksum;
      o.on_changes = [&](uint64_t first, const uint32_t* positions, uint32_t n, const uint8_t*,
                         const uint8_t*) {
        for (uint32_t k = 0; k < n; ++k) reported[known].push_back(first + positions[k]);
      };
      auto enc = encode_delta(old_own, new_own, o);
      ASSERT_TRUE(enc.ok()) << enc.status().to_string();
      records.push_back(std::move(*enc));
    }
    EXPECT_EQ(records[1].record, records[0].record) << describe_slice(box);
    EXPECT_EQ(records[1].header.target_checksum, records[0].header.target_checksum);
    EXPECT_EQ(reported[1], reported[0]) << describe_slice(box);
    EXPECT_FALSE(reported[0].empty());
  }
}

}  // namespace
}  // namespace weightcast
