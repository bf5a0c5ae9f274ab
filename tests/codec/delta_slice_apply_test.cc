// Applying records into engine ranks that hold slices of a tensor (ApplyOptions::dest_slice,
// codec/slice_checksum.h): every slice of every layout (tensor parallel along each dimension,
// an expert split, uneven flat ranges) ends bit-exact with the new version's elements, checked
// against partial checksums that the owners of the tensor's pieces add up; a wrong partial is
// refused before anything is written, a wrong target is reverted, and the bytes around a
// strided slice are never written.
#include <gtest/gtest.h>

#include <cstring>
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
constexpr uint32_t kChunk = 256;

// The slice's elements of a whole tensor's bytes, in local order.
std::vector<uint8_t> gather(const std::vector<uint8_t>& full, const TensorSlice& s) {
  return testing::gather_slice(full, kShape, s);
}

TensorRef view_of(std::vector<uint8_t>& bytes, const std::string& name) {
  return testing::bf16_view(bytes, name);
}

std::vector<uint8_t> encode(const std::vector<uint8_t>& old_bytes,
                            const std::vector<uint8_t>& new_bytes, uint64_t range_offset = 0) {
  EncodeOptions o;
  o.name = "experts.w1";
  o.chunk_elements = kChunk;
  o.range_offset = range_offset;
  o.tensor_elements = kElements;
  auto enc = encode_delta(old_bytes, new_bytes, o);
  EXPECT_TRUE(enc.ok()) << enc.status().to_string();
  if (!enc.ok()) return {};
  // Both kinds of chunk: differences (reverted by subtraction) and raw values (from the undo).
  EXPECT_GT(enc->chunks_by_mode[static_cast<size_t>(ChunkMode::kRaw)], 0u);
  EXPECT_GT(enc->header.changed,
            enc->chunks_by_mode[static_cast<size_t>(ChunkMode::kRaw)] * kChunk);
  return enc->record;
}

std::vector<std::vector<TensorSlice>> layouts() {
  std::vector<std::vector<TensorSlice>> all;
  for (const auto& [dim, parts] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 2}, {2, 2}, {2, 4}, {0, 4}, {1, 5}}) {
    std::vector<TensorSlice> layout;
    for (int64_t i = 0; i < parts; ++i)
      layout.push_back(*TensorSlice::split(kShape, dim, parts, i));
    all.push_back(layout);
  }
  all.push_back({TensorSlice::flat(0, 1000), TensorSlice::flat(1000, 1001),
                 TensorSlice::flat(1001, kElements)});
  return all;
}

// A version with a dense region, so that some chunks are stored raw.
std::vector<uint8_t> next_version(const std::vector<uint8_t>& old_bytes) {
  std::vector<uint8_t> next = perturb(old_bytes, 2, 0.05, 12);
  const std::vector<uint8_t> dense = random_bytes(kChunk * 2 * 2, 13);
  std::memcpy(next.data() + kChunk * 2 * 3, dense.data(), dense.size());
  return next;
}

TEST(DeltaSliceApply, EverySliceOfEveryLayoutEndsBitExactAgainstThePartsOfFourOwners) {
  const std::vector<uint8_t> old_full = random_bytes(kElements * 2, 11);
  std::vector<uint8_t> new_full = next_version(old_full);
  const std::vector<uint8_t> record = encode(old_full, new_full);
  auto view = parse_delta_record(record);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  // The publisher side: four owners of uneven flat ranges crossing rows and experts.
  const std::vector<TensorSlice> owners = {TensorSlice::flat(0, 700), TensorSlice::flat(700, 1900),
                                           TensorSlice::flat(1900, 1901),
                                           TensorSlice::flat(1901, kElements)};
  for (const auto& layout : layouts()) {
    std::vector<uint64_t> base(layout.size(), 0), target(layout.size(), 0);
    for (const TensorSlice& owner : owners) {
      std::vector<uint8_t> old_own = gather(old_full, owner), new_own = gather(new_full, owner);
      auto b = partial_checksums(view_of(old_own, "w1"), kShape, owner, layout);
      auto t = partial_checksums(view_of(new_own, "w1"), kShape, owner, layout);
      ASSERT_TRUE(b.ok() && t.ok()) << b.status().to_string() << t.status().to_string();
      for (size_t k = 0; k < layout.size(); ++k) {
        base[k] += (*b)[k];
        target[k] += (*t)[k];
      }
    }
    uint64_t whole_base = 0;
    for (size_t k = 0; k < layout.size(); ++k) {
      whole_base += base[k];
      // The engine rank of slice k: its own elements only, verified against its partials.
      SliceDestination where{kShape, layout[k]};
      std::vector<uint8_t> held = gather(old_full, layout[k]);
      ApplyOptions o;
      o.dest_slice = &where;
      o.part_base_checksum = base[k];
      o.part_target_checksum = target[k];
      auto applied = apply_delta(*view, view_of(held, "w1"), o);
      ASSERT_TRUE(applied.ok()) << describe_slice(layout[k]) << ": "
                                << applied.status().to_string();
      EXPECT_EQ(applied->checksum, target[k]);
      ASSERT_EQ(held, gather(new_full, layout[k])) << describe_slice(layout[k]);
    }
    // The coordinator's check: one replica's partials add up to the tensor's checksum.
    EXPECT_EQ(whole_base, checksum_range(old_full.data(), 2, kElements, 0));
  }
}

TEST(DeltaSliceApply, ARecordOfOneOwnersRangeCoversOnlyTheSliceElementsInIt) {
  const std::vector<uint8_t> old_full = random_bytes(kElements * 2, 21);
  const std::vector<uint8_t> new_full = next_version(old_full);
  const uint64_t b = 1000, e = 2500;  // the owner's flat range, crossing rows and an expert
  const std::vector<uint8_t> record =
      encode({old_full.begin() + b * 2, old_full.begin() + e * 2},
             {new_full.begin() + b * 2, new_full.begin() + e * 2}, b);
  auto view = parse_delta_record(record);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  const TensorSlice columns = *TensorSlice::split(kShape, 2, 4, 1);
  SliceDestination where{kShape, columns};
  std::vector<uint8_t> held = gather(old_full, columns);
  std::vector<uint8_t> old_copy = old_full, new_copy = new_full;
  const TensorSlice range = TensorSlice::flat(b, e);
  const auto part = [&](std::vector<uint8_t>& full) {
    std::vector<uint8_t> own = gather(full, range);
    return (*partial_checksums(view_of(own, "w1"), kShape, range, {columns}))[0];
  };
  ApplyOptions o;
  o.dest_slice = &where;
  auto refused = apply_delta(*view, view_of(held, "w1"), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("slice [0:4, 0:24, 8:16] holds"), std::string::npos)
      << refused.status().message();
  o.part_base_checksum = part(old_copy);
  o.part_target_checksum = part(new_copy);
  auto applied = apply_delta(*view, view_of(held, "w1"), o);
  ASSERT_TRUE(applied.ok()) << applied.status().to_string();
  // Inside the owner's range the new values, outside it the old ones.
  std::vector<uint8_t> expected = old_full;
  std::memcpy(expected.data() + b * 2, new_full.data() + b * 2, (e - b) * 2);
  EXPECT_EQ(held, gather(expected, columns));
}

TEST(DeltaSliceApply, WrongPartialsAreRefusedOrRevertedAndAStridedSlicesNeighboursStay) {
  const std::vector<uint8_t> old_full = random_bytes(kElements * 2, 31);
  const std::vector<uint8_t> new_full = next_version(old_full);
  const std::vector<uint8_t> record = encode(old_full, new_full);
  auto view = parse_delta_record(record);
  ASSERT_TRUE(view.ok());
  // Rows 8-15 of every expert, held as a strided view inside a larger allocation whose other
  // bytes belong to other tensors.
  const TensorSlice rows = TensorSlice::box({0, 8, 0}, {4, 8, 32});
  const std::vector<uint8_t> slice_old = gather(old_full, rows);
  std::vector<uint8_t> arena = random_bytes((4 * 8 * 40 + 16) * 2, 32);
  TensorRef dest;
  dest.name = "w1 rank 1";
  dest.dtype = DType::kBF16;
  dest.shape = {4, 8, 32};
  dest.strides = {8 * 40, 40, 1};  // rows padded to 40 elements
  dest.offset = 16;
  dest.data = arena.data();
  const ElementAddresser at(dest);
  for (uint64_t k = 0; k < slice_old.size() / 2; ++k) {
    std::memcpy(dest.first_byte() + at.offset_of(k) * 2, slice_old.data() + k * 2, 2);
  }
  const std::vector<uint8_t> arena_before = arena;
  SliceDestination where{kShape, rows};
  std::vector<uint8_t> old_copy = old_full, new_copy = new_full;
  const TensorSlice all = TensorSlice::whole(kShape);
  const uint64_t base = (*partial_checksums(view_of(old_copy, "w1"), kShape, all, {rows}))[0];
  const uint64_t target = (*partial_checksums(view_of(new_copy, "w1"), kShape, all, {rows}))[0];
  ApplyOptions o;
  o.dest_slice = &where;
  o.part_base_checksum = base + 1;
  o.part_target_checksum = target;
  auto wrong_base = apply_delta(*view, dest, o);
  ASSERT_FALSE(wrong_base.ok());
  EXPECT_EQ(wrong_base.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(arena, arena_before);
  o.part_base_checksum = base;
  o.part_target_checksum = target + 1;
  auto wrong_target = apply_delta(*view, dest, o);
  ASSERT_FALSE(wrong_target.ok());
  EXPECT_EQ(wrong_target.status().code(), StatusCode::kChecksumMismatch);
  EXPECT_EQ(arena, arena_before);
  o.part_target_checksum = target;
  // Applied and undone (another tensor of the version failed), then applied for good.
  ApplyUndo undo;
  o.undo = &undo;
  ASSERT_TRUE(apply_delta(*view, dest, o).ok());
  ASSERT_TRUE(revert_delta(*view, dest, undo, o).ok());
  EXPECT_EQ(arena, arena_before);
  o.undo = nullptr;
  ASSERT_TRUE(apply_delta(*view, dest, o).ok());
  const std::vector<uint8_t> slice_new = gather(new_full, rows);
  std::vector<uint8_t> expected = arena_before;
  for (uint64_t k = 0; k < slice_new.size() / 2; ++k) {
    std::memcpy(expected.data() + (16 + at.offset_of(k)) * 2, slice_new.data() + k * 2, 2);
  }
  EXPECT_EQ(arena, expected);
  // A destination of the wrong size, or a slice of another tensor's shape, is refused by name.
  std::vector<uint8_t> small(10);
  auto size = apply_delta(*view, view_of(small, "w1 rank 1"), o);
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("'w1 rank 1' has 5 elements but slice"), std::string::npos)
      << size.status().message();
  SliceDestination other{{4, 24, 16}, TensorSlice::box({0, 8, 0}, {4, 8, 16})};
  o.dest_slice = &other;
  EXPECT_FALSE(apply_delta(*view, dest, o).ok());
}

}  // namespace
}  // namespace weightcast
