#include "transport/fs/slice_checksums.h"

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_manifest.h"

namespace weightcast {

Status add_slice_checksums(std::span<const TensorBytesView> tensors, const DeclaredSlices& declared,
                           ThreadPool* pool, proto::StepManifest* manifest) {
  if (!declared) return ok_status();
  std::vector<std::vector<TensorSlice>> slices(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorBytesView& t = tensors[i];
    ASSIGN_OR_RETURN(slices[i], declared(t.name, t.shape));
    if (slices[i].empty()) continue;
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

const proto::SliceChecksum* find_slice_checksum(const proto::StepManifest& manifest,
                                                const std::string& tensor,
                                                const TensorSlice& slice) {
  for (const auto& entry : manifest.slice_checksums()) {
    if (entry.tensor() == tensor && slice_from_proto(entry.slice()) == slice) return &entry;
  }
  return nullptr;
}

}  // namespace weightcast
