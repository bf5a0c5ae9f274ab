// A rank's share of one tensor: what a sharded publisher rank owns, or what an engine rank
// holds (docs/DECISIONS.md "Sharded tensors"). Everything is in the global tensor's row-major
// flat index space, the space of the records' positions and of the checksum C() (checksum.h).
//
// Two kinds:
//  * a box: an offset and a size along every dimension of the global shape (tensor or expert
//    parallel: a block of rows, of columns, of experts);
//  * a flat range [begin, end) of the flattened tensor (an FSDP flat-parameter shard, which
//    may start and end mid-row).
// A slice's local index k is its k-th element in ascending global order (row-major order of
// the box); a rank that holds a slice's bytes holds them in that order.
//
// A slice's elements form runs of consecutive global indices (a box: one run per row of the
// box, rows merged where the box spans whole inner dimensions; a flat range: one run).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"

namespace weightcast {

struct TensorSlice {
  enum class Kind : uint8_t { kBox, kFlat };
  Kind kind = Kind::kBox;
  std::vector<int64_t> offsets;  // kBox: one per dimension of the global shape
  std::vector<int64_t> sizes;
  uint64_t begin = 0, end = 0;  // kFlat: global flat indices [begin, end)

  static TensorSlice whole(const std::vector<int64_t>& shape);
  static TensorSlice box(std::vector<int64_t> offsets, std::vector<int64_t> sizes);
  static TensorSlice flat(uint64_t begin, uint64_t end);
  // Part `index` of `parts` along dimension `dim`, as torch.tensor_split cuts: the first
  // (extent % parts) parts are one longer than the others.
  static Result<TensorSlice> split(const std::vector<int64_t>& shape, int64_t dim, int64_t parts,
                                   int64_t index);

  bool operator==(const TensorSlice&) const = default;
};

// The slice lies inside `shape` (a box has one offset and size per dimension, none negative;
// a flat range ends by the tensor's end). Errors name the tensor and the slice.
[[nodiscard]] Status check_slice(const std::string& tensor, const std::vector<int64_t>& shape,
                                 const TensorSlice& slice);

uint64_t slice_elements(const std::vector<int64_t>& shape, const TensorSlice& slice);
// "[0:4, 8:16]" for a box, "elements [a, b)" for a flat range.
std::string describe_slice(const TensorSlice& slice);
// "[3, 17]": the multi-index of global flat index `global`.
std::string describe_element(const std::vector<int64_t>& shape, uint64_t global);

// A run of a slice: `count` elements at global indices [global, global + count), local
// indices [local, local + count).
struct SliceRun {
  uint64_t global = 0;
  uint64_t local = 0;
  uint64_t count = 0;
};

// The slice's runs, clipped to global indices [lo, hi), in ascending order; fn returns false
// to stop. Starts at the first run that reaches lo without walking the ones before it. The
// slice must have passed check_slice.
void for_each_slice_run(const std::vector<int64_t>& shape, const TensorSlice& slice, uint64_t lo,
                        uint64_t hi, const std::function<bool(const SliceRun&)>& fn);
inline void for_each_slice_run(const std::vector<int64_t>& shape, const TensorSlice& slice,
                               const std::function<bool(const SliceRun&)>& fn) {
  for_each_slice_run(shape, slice, 0, UINT64_MAX, fn);
}

// Maps global flat indices to a slice's local indices in O(dimensions).
class SliceLocator {
 public:
  SliceLocator(const std::vector<int64_t>& shape, const TensorSlice& slice);
  // The local index of `global`, nullopt when the slice does not hold it.
  std::optional<uint64_t> local(uint64_t global) const;
  // The global indices [first, end) between the slice's first and last element.
  uint64_t first() const { return first_; }
  uint64_t end() const { return end_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<uint64_t> strides_;  // row-major, of the global shape
  TensorSlice slice_;
  uint64_t first_ = 0, end_ = 0;
  bool one_run_ = false;  // the slice is the global indices [first_, end_)
};

// Maps a slice's local indices to global flat indices in O(dimensions): what a record of a
// slice's elements (EncodeOptions::slice) needs to place them and to weigh them in C().
class SliceIndexMap {
 public:
  SliceIndexMap(const std::vector<int64_t>& shape, const TensorSlice& slice);
  uint64_t global(uint64_t local) const;
  // The slice's runs holding local indices [lo, hi) (lo < hi <= its elements), clipped to
  // them, ascending; fn returns false to stop.
  void for_each_run(uint64_t lo, uint64_t hi, const std::function<bool(const SliceRun&)>& fn) const;

 private:
  std::vector<int64_t> shape_;
  std::vector<uint64_t> strides_;  // row-major, of the global shape
  TensorSlice slice_;
  bool flat_ = false;
};

// A slice together with the global shape it cuts.
struct ShapedSlice {
  std::vector<int64_t> shape;
  TensorSlice slice;
};

// Elements both slices hold: `count` elements at global index `global`, local index `local_a`
// in `a` and `local_b` in `b`, ascending; fn returns false to stop.
struct SharedRun {
  uint64_t global = 0, local_a = 0, local_b = 0, count = 0;
};
void for_each_shared_run(const std::vector<int64_t>& shape, const TensorSlice& a,
                         const TensorSlice& b, const std::function<bool(const SharedRun&)>& fn);

// One rank's slice of a tensor as it declared it.
struct RankSlice {
  uint32_t rank = 0;
  std::vector<int64_t> shape;  // the global shape the rank declared
  DType dtype = DType::kU8;
  TensorSlice slice;
};

// The slices of one layout (the publisher ranks, or the ranks of one engine replica) tile
// tensor `tensor` exactly: every rank declared the same global shape and dtype, every slice
// lies inside it, no element is held twice and none is missing. Errors name the tensor, the
// ranks and the element at fault.
// With `whole` false only the overlaps are refused (the slices of some of the ranks).
[[nodiscard]] Status check_tiling(const std::string& tensor, const std::vector<RankSlice>& slices,
                                  bool whole = true);
// Whether two slices of a tensor of `shape` share an element.
bool slices_meet(const std::vector<int64_t>& shape, const TensorSlice& a, const TensorSlice& b);

// Whether every element of box `inner` lies in `outer` (a box, or a flat range); then each run
// of consecutive global indices of `inner` is also consecutive in `outer`'s local order.
// False for a flat `inner`.
bool slice_holds_box(const std::vector<int64_t>& shape, const TensorSlice& outer,
                     const TensorSlice& inner);

// A box whose runs of consecutive global indices are evenly spaced (at most one dimension
// above them spans more than one index: a block of rows of a matrix): run r holds global
// indices [first + r * stride, first + r * stride + length) and local ones from r * length.
struct EvenRuns {
  uint64_t first = 0;
  uint64_t length = 0;
  uint64_t stride = 0;
};
std::optional<EvenRuns> even_runs(const std::vector<int64_t>& shape, const TensorSlice& box);

}  // namespace weightcast
