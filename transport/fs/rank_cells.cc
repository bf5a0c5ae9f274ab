#include "transport/fs/rank_cells.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace weightcast {
namespace {

// Cut points strictly inside (lo, hi), sorted, with lo and hi at the ends.
std::vector<uint64_t> points_within(const std::set<uint64_t>& cuts, uint64_t lo, uint64_t hi) {
  std::vector<uint64_t> out = {lo};
  for (auto it = cuts.upper_bound(lo); it != cuts.end() && *it < hi; ++it) out.push_back(*it);
  out.push_back(hi);
  return out;
}

struct Cuts {
  std::set<uint64_t> flat;  // element indices (rows x row length, flat slices' ends)
  std::set<uint64_t> rows;  // row indices (dimension 0)
  std::set<uint64_t> cols;  // column indices (matrices only)
};

Cuts cuts_of(const std::vector<int64_t>& shape, uint64_t row_elements,
             const std::vector<TensorSlice>& declared) {
  Cuts c;
  const bool matrix = shape.size() == 2;
  for (const TensorSlice& s : declared) {
    if (s.kind == TensorSlice::Kind::kFlat) {
      c.flat.insert(s.begin);
      c.flat.insert(s.end);
      continue;
    }
    if (s.offsets.empty()) continue;
    for (const int64_t r : {s.offsets[0], s.offsets[0] + s.sizes[0]}) {
      c.rows.insert(static_cast<uint64_t>(r));
      c.flat.insert(static_cast<uint64_t>(r) * row_elements);
    }
    if (matrix) {
      c.cols.insert(static_cast<uint64_t>(s.offsets[1]));
      c.cols.insert(static_cast<uint64_t>(s.offsets[1] + s.sizes[1]));
    }
  }
  if (matrix) {
    c.cols.erase(0);
    c.cols.erase(static_cast<uint64_t>(shape[1]));
  }
  return c;
}

RankCell flat_cell(uint64_t first, uint64_t count, uint64_t offset) {
  return {first, count, std::nullopt, offset, count, count};
}

// Rows [r0, r1) x columns [c0, c1) of a matrix of `cols` columns, whose elements lie at
// `offset` in the rank's memory with rows `stride` apart (stride == cols when the range held
// whole rows, its own width when it was a box).
RankCell box_cell(uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1, uint64_t cols,
                  uint64_t offset, uint64_t stride) {
  const uint64_t width = c1 - c0, rows = r1 - r0;
  // One row, or whole rows (then stride == width): consecutive elements, a flat range.
  if (rows == 1 || width == cols) return flat_cell(r0 * cols + c0, rows * width, offset);
  return {0,
          rows * width,
          TensorSlice::box({static_cast<int64_t>(r0), static_cast<int64_t>(c0)},
                           {static_cast<int64_t>(rows), static_cast<int64_t>(width)}),
          offset,
          width,
          stride};
}

}  // namespace

Result<std::vector<RankCell>> rank_cells(const std::vector<int64_t>& shape, uint64_t first,
                                         uint64_t count, const std::optional<TensorSlice>& box,
                                         const std::vector<TensorSlice>& declared, bool columns) {
  uint64_t numel = 1;
  for (const int64_t d : shape) numel *= static_cast<uint64_t>(d);
  const uint64_t row = shape.empty() || shape[0] == 0 ? 1 : numel / static_cast<uint64_t>(shape[0]);
  Cuts cuts = cuts_of(shape, row, declared);
  if (!columns) cuts.cols.clear();
  std::vector<RankCell> out;
  if (box) {
    if (shape.size() != 2 || box->offsets.size() != 2) {  // cut along dimension 0 only
      return std::vector<RankCell>{{0, count, box, 0, count, count}};
    }
    const auto r0 = static_cast<uint64_t>(box->offsets[0]),
               c0 = static_cast<uint64_t>(box->offsets[1]);
    const uint64_t width = static_cast<uint64_t>(box->sizes[1]);
    const uint64_t cols = static_cast<uint64_t>(shape[1]);
    const auto rows = points_within(cuts.rows, r0, r0 + static_cast<uint64_t>(box->sizes[0]));
    const auto colv = points_within(cuts.cols, c0, c0 + width);
    for (size_t i = 0; i + 1 < rows.size(); ++i) {
      for (size_t j = 0; j + 1 < colv.size(); ++j) {
        out.push_back(box_cell(rows[i], rows[i + 1], colv[j], colv[j + 1], cols,
                               (rows[i] - r0) * width + (colv[j] - c0), width));
      }
    }
    return out;
  }
  const auto segments = points_within(cuts.flat, first, first + count);
  const bool matrix = shape.size() == 2 && !cuts.cols.empty();
  const uint64_t cols = matrix ? static_cast<uint64_t>(shape[1]) : 0;
  // A run [s, e) within one row, cut at the column cuts.
  const auto partial_row = [&](uint64_t s, uint64_t e) {
    const uint64_t base = s / cols * cols;
    const auto at = points_within(cuts.cols, s - base, e - base);
    for (size_t j = 0; j + 1 < at.size(); ++j) {
      out.push_back(flat_cell(base + at[j], at[j + 1] - at[j], base + at[j] - first));
    }
  };
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    const uint64_t s = segments[i], e = segments[i + 1];
    if (!matrix) {
      out.push_back(flat_cell(s, e - s, s - first));
      continue;
    }
    const uint64_t r0 = (s + cols - 1) / cols, r1 = e / cols;  // the whole rows
    if (r0 >= r1) {  // no whole row: one or two partial rows
      const uint64_t mid = std::max(s, std::min(e, r0 * cols));
      if (s < mid) partial_row(s, mid);
      if (mid < e) partial_row(mid, e);
      continue;
    }
    if (s < r0 * cols) partial_row(s, r0 * cols);
    const auto colv = points_within(cuts.cols, 0, cols);
    for (size_t j = 0; j + 1 < colv.size(); ++j) {
      out.push_back(
          box_cell(r0, r1, colv[j], colv[j + 1], cols, r0 * cols + colv[j] - first, cols));
    }
    if (r1 * cols < e) partial_row(r1 * cols, e);
  }
  return out;
}

std::span<const uint8_t> cell_bytes(const RankCell& cell, size_t element_size, const uint8_t* range,
                                    std::vector<uint8_t>* scratch) {
  const uint8_t* at = range + cell.offset * element_size;
  if (cell.contiguous()) return {at, cell.count * element_size};
  scratch->resize(cell.count * element_size);
  const size_t run = cell.run * element_size, stride = cell.stride * element_size;
  for (uint64_t k = 0; k < cell.count / cell.run; ++k) {
    std::memcpy(scratch->data() + k * run, at + k * stride, run);
  }
  return *scratch;
}

}  // namespace weightcast
