// How a publisher rank cuts its ranges for deltas (docs/DECISIONS.md "Several publisher
// ranks"): each range (a flat range or a box, as rank_publisher.h owns it) is cut further
// along the boundaries of the slices the engine layouts declare, so that each delta record
// meets one slice of every layout. An engine rank then reads only records of its own
// elements, and each rank's records reach each replica once, however the trainer's and the
// engines' splits differ.
//
// The cuts, for a tensor of shape [R, ...] with declared slices:
//  * along dimension 0 at every row where a declared box starts or ends (any rank of tensor),
//    and at the ends of declared flat slices;
//  * for a matrix [R, C], also along the columns where a declared box starts or ends: the
//    whole rows of a flat range become boxes (rows x a block of columns), a partial row is cut
//    into flat runs, and a box is cut into narrower boxes.
// A cell that holds consecutive elements of the tensor is a flat range. A cell's elements
// lie in the rank's memory as `runs` runs of `run` elements, `stride` elements apart (a block
// of columns of rows held whole), or contiguously.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_slice.h"

namespace weightcast {

struct RankCell {
  // Its elements: flat [first, first + count), or `box` (its local order row-major).
  uint64_t first = 0;
  uint64_t count = 0;
  std::optional<TensorSlice> box;
  // Where they lie, relative to the range's first element in the rank's memory: `offset`
  // elements in, then `run` elements every `stride` (run == stride: contiguous).
  uint64_t offset = 0;
  uint64_t run = 0;
  uint64_t stride = 0;
  bool contiguous() const { return run == stride || count == run; }
  TensorSlice slice() const { return box ? *box : TensorSlice::flat(first, first + count); }
};

// The cells of a rank's range of a tensor of `shape`: flat [first, first + count), or `box`
// when given (its elements row-major in the rank's memory). `declared`: the tensor's slices
// of every engine layout (none: one cell, the range itself). In the range's element order.
// Without `columns`, cut along rows only (fewer boxes).
Result<std::vector<RankCell>> rank_cells(const std::vector<int64_t>& shape, uint64_t first,
                                         uint64_t count, const std::optional<TensorSlice>& box,
                                         const std::vector<TensorSlice>& declared,
                                         bool columns = true);

// Cell `cell`'s elements (`element_size` bytes each) from the range's memory `range`, as
// contiguous bytes: a view of `range` when they lie contiguously, else gathered into
// `scratch`.
std::span<const uint8_t> cell_bytes(const RankCell& cell, size_t element_size, const uint8_t* range,
                                    std::vector<uint8_t>* scratch);

}  // namespace weightcast
