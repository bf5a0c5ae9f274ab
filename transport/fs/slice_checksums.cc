#include "transport/fs/slice_checksums.h"

#include <algorithm>
#include <cstring>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_manifest.h"

namespace weightcast {

Status add_slice_checksums(std::span<const TensorBytesView> tensors, const DeclaredSlices& declared,
                           ThreadPool* pool, proto::StepManifest* manifest,
                           std::span<const std::optional<std::vector<uint64_t>>> known) {
  if (!declared) return ok_status();
  std::vector<std::vector<TensorSlice>> slices(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorBytesView& t = tensors[i];
    ASSIGN_OR_RETURN(slices[i], declared(t.name, t.shape));
    if (slices[i].empty() || (i < known.size() && known[i])) continue;
    ASSIGN_OR_RETURN(const uint64_t n, shape_numel(t.shape, "tensor '" + t.name + "'"));
    if (t.bytes.size() != n * dtype_size(t.dtype)) {
      return invalid_argument("tensor '" + t.name + "': the checksums of the slices engine " +
                              "layouts hold need its bytes in host memory, and version " +
                              std::to_string(manifest->version()) + " has none of them here");
    }
  }
  std::vector<std::vector<uint64_t>> sums(tensors.size());
  const auto one = [&](size_t i) {
    const TensorBytesView& t = tensors[i];
    const size_t es = dtype_size(t.dtype);
    if (i < known.size() && known[i]) {
      sums[i] = *known[i];
      return;
    }
    sums[i].assign(slices[i].size(), 0);
    for (size_t k = 0; k < slices[i].size(); ++k) {
      for_each_slice_run(t.shape, slices[i][k], [&](const SliceRun& r) {
        sums[i][k] += checksum_range(t.bytes.data() + r.global * es, es, r.count, r.global);
        return true;
      });
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(tensors.size(), one);
  } else {
    for (size_t i = 0; i < tensors.size(); ++i) one(i);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (size_t k = 0; k < slices[i].size(); ++k) {
      auto* entry = manifest->add_slice_checksums();
      entry->set_tensor(tensors[i].name);
      *entry->mutable_slice() = slice_to_proto(slices[i][k]);
      entry->set_checksum(sums[i][k]);
    }
  }
  return ok_status();
}

SliceChecksumIndex::SliceChecksumIndex(const proto::StepManifest& manifest) {
  for (const auto& entry : manifest.slice_checksums()) by_tensor_[entry.tensor()].push_back(&entry);
}

const proto::SliceChecksum* SliceChecksumIndex::find(const std::string& tensor,
                                                     const TensorSlice& slice) const {
  const auto it = by_tensor_.find(tensor);
  if (it == by_tensor_.end()) return nullptr;
  for (const proto::SliceChecksum* entry : it->second) {
    if (slice_from_proto(entry->slice()) == slice) return entry;
  }
  return nullptr;
}

SliceChangeSums::SliceChangeSums(std::vector<int64_t> shape, const std::vector<TensorSlice>& slices,
                                 size_t elem_size, std::vector<uint64_t> base)
    : shape_(std::move(shape)),
      slices_(slices),
      elem_size_(elem_size),
      base_(std::move(base)),
      change_(std::make_unique<std::atomic<uint64_t>[]>(slices.size())) {
  for (size_t k = 0; k < slices.size(); ++k) change_[k] = 0;
}

void SliceChangeSums::add(uint64_t global_first, const uint32_t* positions, uint32_t n,
                          const uint8_t* old_chunk, const uint8_t* new_chunk) {
  // Each change's term once, as prefix sums; then per slice, its runs that meet the chunk
  // walked beside the ascending positions, each run adding a difference of two prefixes.
  thread_local std::vector<uint64_t> prefix;
  prefix.resize(size_t{n} + 1);
  prefix[0] = 0;
  for (uint32_t j = 0; j < n; ++j) {
    uint64_t old_bits = 0, new_bits = 0;
    std::memcpy(&old_bits, old_chunk + size_t{positions[j]} * elem_size_, elem_size_);
    std::memcpy(&new_bits, new_chunk + size_t{positions[j]} * elem_size_, elem_size_);
    prefix[j + 1] =
        prefix[j] + checksum_change(global_first + positions[j], old_bits, new_bits, elem_size_);
  }
  const uint64_t chunk_end = global_first + positions[n - 1] + 1;
  for (size_t k = 0; k < slices_.size(); ++k) {
    uint64_t sum = 0;
    uint32_t j = 0;
    for_each_slice_run(shape_, slices_[k], global_first, chunk_end, [&](const SliceRun& r) {
      const uint64_t begin = r.global - global_first, end = begin + r.count;
      j = static_cast<uint32_t>(std::lower_bound(positions + j, positions + n, begin) - positions);
      const auto stop =
          static_cast<uint32_t>(std::lower_bound(positions + j, positions + n, end) - positions);
      sum += prefix[stop] - prefix[j];
      j = stop;
      return j < n;
    });
    if (sum != 0) change_[k].fetch_add(sum, std::memory_order_relaxed);
  }
}

std::vector<uint64_t> SliceChangeSums::sums() const {
  std::vector<uint64_t> out(base_.size());
  for (size_t k = 0; k < out.size(); ++k) {
    out[k] = base_[k] + change_[k].load(std::memory_order_relaxed);
  }
  return out;
}

std::vector<std::unique_ptr<SliceChangeSums>> track_slice_changes(
    std::span<const TensorBytesView> tensors, const DeclaredSlices& declared,
    const proto::StepManifest& base, const std::function<bool(size_t)>& encoded_here) {
  std::vector<std::unique_ptr<SliceChangeSums>> out(tensors.size());
  if (!declared || base.slice_checksums().empty()) return out;
  const SliceChecksumIndex index(base);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!encoded_here(i)) continue;
    auto slices = declared(tensors[i].name, tensors[i].shape);
    if (!slices.ok() || slices->empty()) continue;  // an error shows when they are computed
    std::vector<uint64_t> sums;
    for (const TensorSlice& s : *slices) {
      const proto::SliceChecksum* entry = index.find(tensors[i].name, s);
      if (entry == nullptr) break;
      sums.push_back(entry->checksum());
    }
    if (sums.size() != slices->size()) continue;
    out[i] = std::make_unique<SliceChangeSums>(tensors[i].shape, *slices,
                                               dtype_size(tensors[i].dtype), std::move(sums));
  }
  return out;
}

std::vector<std::optional<std::vector<uint64_t>>> tracked_sums(
    const std::vector<std::unique_ptr<SliceChangeSums>>& tracked) {
  std::vector<std::optional<std::vector<uint64_t>>> out(tracked.size());
  for (size_t i = 0; i < tracked.size(); ++i) {
    if (tracked[i]) out[i] = tracked[i]->sums();
  }
  return out;
}

}  // namespace weightcast
