// The slice checksums of a step's manifest (journal.proto SliceChecksum): for every tensor,
// C() of each slice that an engine layout of the group cuts from it (src/control/layouts.h),
// so that an engine rank holding only that slice verifies a version on its own (DESIGN §3
// "Shards verify locally"). Computed by the writer from the version's bytes, one pass over a
// tensor per distinct slice layout.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_bytes.h"
#include "codec/tensor_slice.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

class ThreadPool;

// The slices whose checksums a tensor's entries carry (the whole tensor left out: its
// checksum is TensorState.checksum); empty for a tensor no layout splits.
using DeclaredSlices = std::function<Result<std::vector<TensorSlice>>(
    const std::string& tensor, const std::vector<int64_t>& shape)>;

// Appends to manifest->slice_checksums, for each tensor and each of its declared slices, C()
// of that slice of `tensors[i]`'s bytes (the version's, contiguous host bytes). A tensor with
// declared slices whose bytes are not given is refused by name. Runs on `pool` when given.
[[nodiscard]] Status add_slice_checksums(std::span<const TensorBytesView> tensors,
                                         const DeclaredSlices& declared, ThreadPool* pool,
                                         proto::StepManifest* manifest);

// The entries of a manifest by tensor, so that finding each reader's slice costs the entries
// of its tensor, not of the whole manifest. Valid while the manifest is.
class SliceChecksumIndex {
 public:
  explicit SliceChecksumIndex(const proto::StepManifest& manifest);
  // The entry for `slice` of `tensor`; nullptr when the manifest has none.
  const proto::SliceChecksum* find(const std::string& tensor, const TensorSlice& slice) const;

 private:
  std::unordered_map<std::string, std::vector<const proto::SliceChecksum*>> by_tensor_;
};

// The entry of `manifest` for `slice` of `tensor`; nullptr when it has none (one lookup: a
// reader of many tensors builds a SliceChecksumIndex).
const proto::SliceChecksum* find_slice_checksum(const proto::StepManifest& manifest,
                                                const std::string& tensor,
                                                const TensorSlice& slice);

}  // namespace weightcast
