// rank_cells (transport/fs/rank_cells.h): a publisher rank's range cut along the declared
// slices of the engine layouts. For flat ranges and boxes of matrices (and a flat range of a
// 3-D tensor): the cells hold exactly the range's elements, once each; no cell meets two
// slices of one layout; and each cell's bytes, read from the range's memory (gathered where
// they are strided), are its elements in its own order. A rank whose column cuts would give a
// tensor more boxes than a manifest takes cuts it by rows only, and its delta commits.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "tests/transport/journal_test_model.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"
#include "transport/fs/rank_cells.h"
#include "transport/fs/rank_publisher.h"

namespace weightcast {
namespace {

// The global indices a slice of `shape` holds, in its local order.
std::vector<uint64_t> indices_of(const std::vector<int64_t>& shape, const TensorSlice& s) {
  std::vector<uint64_t> out;
  for_each_slice_run(shape, s, [&](const SliceRun& run) {
    for (uint64_t k = 0; k < run.count; ++k) out.push_back(run.global + k);
    return true;
  });
  return out;
}

// Every property above, for the range `owned` of a tensor of `shape` under `layouts`.
void expect_cells(const std::vector<int64_t>& shape, const TensorSlice& owned,
                  const std::vector<std::vector<TensorSlice>>& layouts, size_t expected_cells) {
  std::vector<TensorSlice> declared;
  for (const auto& l : layouts) declared.insert(declared.end(), l.begin(), l.end());
  const bool is_box = owned.kind == TensorSlice::Kind::kBox;
  const std::vector<uint64_t> held = indices_of(shape, owned);  // the rank's memory, in order
  std::vector<uint32_t> memory(held.begin(), held.end());
  auto cells = rank_cells(shape, is_box ? 0 : owned.begin, held.size(),
                          is_box ? std::optional<TensorSlice>(owned) : std::nullopt, declared);
  ASSERT_TRUE(cells.ok()) << cells.status().to_string();
  EXPECT_EQ(cells->size(), expected_cells);
  std::multiset<uint64_t> seen;
  std::vector<uint8_t> scratch;
  for (const RankCell& c : *cells) {
    const std::vector<uint64_t> mine = indices_of(shape, c.slice());
    ASSERT_EQ(mine.size(), c.count) << describe_slice(c.slice());
    seen.insert(mine.begin(), mine.end());
    const auto bytes = cell_bytes(c, 4, reinterpret_cast<const uint8_t*>(memory.data()), &scratch);
    ASSERT_EQ(bytes.size(), c.count * 4);
    std::vector<uint32_t> got(c.count);
    std::memcpy(got.data(), bytes.data(), bytes.size());
    EXPECT_EQ(std::vector<uint64_t>(got.begin(), got.end()), mine) << describe_slice(c.slice());
    for (const auto& layout : layouts) {
      size_t met = 0;
      for (const TensorSlice& s : layout) met += slices_meet(shape, s, c.slice()) ? 1 : 0;
      EXPECT_LE(met, 1u) << describe_slice(c.slice()) << " meets " << met << " parts";
    }
  }
  EXPECT_EQ(seen, std::multiset<uint64_t>(held.begin(), held.end()));
}

std::vector<TensorSlice> split(const std::vector<int64_t>& shape, int64_t dim, int64_t parts) {
  std::vector<TensorSlice> out;
  for (int64_t p = 0; p < parts; ++p) out.push_back(*TensorSlice::split(shape, dim, parts, p));
  return out;
}

TEST(RankCells, WithoutDeclaredSlicesARangeIsOneCell) {
  expect_cells({8, 6}, TensorSlice::flat(5, 40), {}, 1);
  expect_cells({8, 6}, TensorSlice::box({1, 2}, {6, 4}), {}, 1);
}

TEST(RankCells, AFlatRangeIsCutAlongRowsAndColumnsOfBothLayouts) {
  const std::vector<int64_t> shape = {8, 6};
  // [5, 40): row 0's last element, rows 1-3 whole, rows 4-5 whole, row 6's first 4.
  // Row 0 tail: 1 cell; rows 1-3: 2 boxes; rows 4-5: 2 boxes; row 6 head: 2 runs.
  expect_cells(shape, TensorSlice::flat(5, 40), {split(shape, 0, 2), split(shape, 1, 2)}, 7);
  // Rows only: cut at row 4 (element 24).
  expect_cells(shape, TensorSlice::flat(5, 40), {split(shape, 0, 2)}, 2);
  // Columns in three: rows 1-5 whole become 3 boxes, the partial rows their runs.
  expect_cells(shape, TensorSlice::flat(5, 40), {split(shape, 1, 3)}, 1 + 3 + 2);
}

TEST(RankCells, ABoxIsCutIntoNarrowerBoxes) {
  const std::vector<int64_t> shape = {8, 6};
  // Rows 1-6 x columns 2-5, cut at row 4 and column 3: four boxes.
  expect_cells(shape, TensorSlice::box({1, 2}, {6, 4}), {split(shape, 0, 2), split(shape, 1, 2)},
               4);
  // A block of one row is a flat run.
  expect_cells(shape, TensorSlice::box({3, 0}, {1, 6}), {split(shape, 1, 2)}, 2);
}

TEST(RankCells, OtherTensorsAreCutAlongTheirFirstDimension) {
  const std::vector<int64_t> shape = {4, 3, 5};  // experts x rows x columns
  expect_cells(shape, TensorSlice::flat(7, 50), {split(shape, 0, 4)}, 4);
  expect_cells(shape, TensorSlice::flat(0, 60), {split(shape, 0, 2)}, 2);
  expect_cells({1000}, TensorSlice::flat(100, 900), {split({1000}, 0, 2)}, 2);
}

TEST(RankCells, WithoutColumnsOnlyRowsAreCut) {
  const std::vector<int64_t> shape = {8, 6};
  auto cells = rank_cells(shape, 5, 35, std::nullopt, split(shape, 1, 2), /*columns=*/false);
  ASSERT_TRUE(cells.ok());
  ASSERT_EQ(cells->size(), 1u);
  EXPECT_FALSE((*cells)[0].box.has_value());
}

TEST(RankCells, ARankPastItsShareOfBoxesCutsByRowsAndItsDeltaCommits) {
  testing::ScratchDir dir;
  // 2050 rows of 8 columns in pieces of two rows, a layout of 4 column blocks: 4100 boxes,
  // more than a manifest takes for one tensor (4096).
  const std::vector<int64_t> shape = {2050, 8};
  std::vector<uint16_t> weights(2050 * 8);
  for (size_t k = 0; k < weights.size(); ++k) weights[k] = static_cast<uint16_t>(k * 7);
  RankPublisherOptions o;
  o.root = dir.path();
  o.piece_elements = 16;
  o.journal.root = dir.path();
  o.journal.declared_slices = [](const std::string&, const std::vector<int64_t>& s) {
    return Result<std::vector<TensorSlice>>(split(s, 1, 4));
  };
  auto p = RankPublisher::open(
      o, {{"w", DType::kBF16, shape}},
      {{"w", 0, weights.size(), reinterpret_cast<const uint8_t*>(weights.data())}});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE((*p)->publish(0).ok());
  for (size_t k = 0; k < weights.size(); k += 97) weights[k] += 1;
  auto delta = (*p)->publish(1);
  ASSERT_TRUE(delta.ok()) << delta.status().to_string();
  auto m = read_manifest_file(JournalLayout(dir.path()).step(1) + "/MANIFEST");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->tensors_size(), 1);
  EXPECT_EQ(m->tensors(0).ranges_size(), 1025);  // a flat range per piece
  for (const auto& r : m->tensors(0).ranges()) EXPECT_FALSE(r.has_box());
}

}  // namespace
}  // namespace weightcast
