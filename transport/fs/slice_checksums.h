// The slice checksums of a step's manifest (journal.proto SliceChecksum): for every tensor,
// C() of each slice that an engine layout of the group cuts from it (src/control/layouts.h),
// so that an engine rank holding only that slice verifies a version on its own
// (docs/DECISIONS.md "Sharded tensors"). The writer follows them from the head version's
// through the encoder's changes (SliceChangeSums), or else computes them from the version's
// bytes, one pass over a tensor per distinct slice.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
// of that slice: known[i] when given (the checksums of tensor i's declared slices, in their
// order, kept up to date by a SliceChangeSums: one per declared slice), else computed from
// `tensors[i]`'s bytes (the version's, contiguous host bytes; a tensor with declared slices whose
// bytes are not given is refused by name). Runs on `pool` when given.
[[nodiscard]] Status add_slice_checksums(
    std::span<const TensorBytesView> tensors, const DeclaredSlices& declared, ThreadPool* pool,
    proto::StepManifest* manifest,
    std::span<const std::optional<std::vector<uint64_t>>> known = {});

// The checksums of one tensor's declared slices brought from the base version to the new one
// by the changes the encoder reports (EncodeOptions::on_changes), in O(changed): each change
// adds (i + 1) * (m(new) - m(old)) to every slice that holds element i.
class SliceChangeSums {
 public:
  // `base[k]`: C() of slices[k] at the base version.
  SliceChangeSums(std::vector<int64_t> shape, const std::vector<TensorSlice>& slices,
                  size_t elem_size, std::vector<uint64_t> base);
  // The encoder's on_changes; safe from several threads at once.
  void add(uint64_t global_first, const uint32_t* positions, uint32_t n, const uint8_t* old_chunk,
           const uint8_t* new_chunk);
  // C() of each slice at the new version, once every chunk was reported.
  std::vector<uint64_t> sums() const;

 private:
  std::vector<int64_t> shape_;
  std::vector<TensorSlice> slices_;
  size_t elem_size_;
  std::vector<uint64_t> base_;
  std::unique_ptr<std::atomic<uint64_t>[]> change_;
};

// A SliceChangeSums for each tensor i with declared slices that `encoded_here(i)` says the
// caller encodes with encode_delta(_advancing) and whose slices all have checksums in
// `base` (the head version's manifest); null for the others, whose slice checksums are then
// computed from their bytes.
std::vector<std::unique_ptr<SliceChangeSums>> track_slice_changes(
    std::span<const TensorBytesView> tensors, const DeclaredSlices& declared,
    const proto::StepManifest& base, const std::function<bool(size_t)>& encoded_here);
// Their sums, for add_slice_checksums' `known`.
std::vector<std::optional<std::vector<uint64_t>>> tracked_sums(
    const std::vector<std::unique_ptr<SliceChangeSums>>& tracked);

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

}  // namespace weightcast
