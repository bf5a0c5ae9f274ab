// C() (checksum.h) over slices of a tensor (tensor_slice.h): what a rank holding a slice
// checks and what the ranks that publish a sharded tensor give each engine rank to verify
// against (docs/DECISIONS.md "Sharded tensors"). C() sums over global indices, so the
// checksum of a slice is the sum of its runs' and the shares of several owners add up.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_apply.h"
#include "codec/tensor_ref.h"
#include "codec/tensor_slice.h"

namespace weightcast {

// C() over the elements of `where.slice` whose global indices lie in [lo, hi), read from
// `view`, which holds the slice's elements in its local order (host memory, any strides).
Result<uint64_t> slice_checksum(const TensorRef& view, const SliceDestination& where,
                                uint64_t lo = 0, uint64_t hi = UINT64_MAX);

// The shares a rank holding `own` (its elements in `own_view`, local order, host memory)
// contributes to the checksums of the slices of a layout: result[k] is C() over the elements
// both `own` and layout[k] hold. Summed over the owners that tile the tensor, result[k] is
// C() of layout[k]. One pass over `own` per layout slice it meets.
Result<std::vector<uint64_t>> partial_checksums(const TensorRef& own_view,
                                                const std::vector<int64_t>& shape,
                                                const TensorSlice& own,
                                                const std::vector<TensorSlice>& layout);

}  // namespace weightcast
