#include "transport/fs/anchor_in_place.h"

#include <vector>

#include "codec/base/allocation.h"
#include "transport/fs/anchor_reader.h"
#include "transport/tensor_staging.h"

namespace weightcast {

Status read_anchor_in_place(const std::string& dir, const proto::StepManifest& m,
                            std::span<const TensorRef> views, ThreadPool* pool,
                            uint64_t staging_bytes, uint64_t* bytes_written) {
  if (views.size() != static_cast<size_t>(m.tensors_size())) {
    return invalid_argument("anchor '" + dir + "': " + std::to_string(views.size()) +
                            " destinations for " + std::to_string(m.tensors_size()) + " tensors");
  }
  std::vector<size_t> direct, staged;
  std::vector<std::span<uint8_t>> direct_bytes;
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorRef& v = views[i];
    if (v.data == nullptr) continue;
    RETURN_IF_ERROR(check_stageable(v));
    const uint64_t bytes = v.numel() * v.element_size();
    if (bytes != m.tensors(static_cast<int>(i)).bytes()) {
      return invalid_argument("anchor '" + dir + "': destination of '" + v.name + "' has " +
                              std::to_string(bytes) + " bytes, the tensor " +
                              std::to_string(m.tensors(static_cast<int>(i)).bytes()));
    }
    if (v.memory != MemoryKind::kCuda && v.is_contiguous()) {
      direct.push_back(i);
      direct_bytes.emplace_back(v.first_byte(), bytes);
    } else {
      staged.push_back(i);
    }
  }
  RETURN_IF_ERROR(read_anchor_tensors(dir, m, direct, direct_bytes, pool));
  uint64_t written = 0;
  for (const size_t i : direct) written += m.tensors(static_cast<int>(i)).bytes();
  // The rest in batches of at most staging_bytes (or one larger tensor).
  for (size_t at = 0; at < staged.size();) {
    std::vector<size_t> batch;
    uint64_t batch_bytes = 0;
    while (at < staged.size()) {
      const uint64_t b = m.tensors(static_cast<int>(staged[at])).bytes();
      if (!batch.empty() && batch_bytes + b > staging_bytes) break;
      batch.push_back(staged[at++]);
      batch_bytes += b;
    }
    ASSIGN_OR_RETURN(std::vector<uint8_t> buffer,
                     allocate_bytes(batch_bytes, "staging of anchor tensors for '" +
                                                     views[batch.front()].name + "'"));
    std::vector<std::span<uint8_t>> spans;
    uint64_t offset = 0;
    for (const size_t i : batch) {
      const uint64_t b = m.tensors(static_cast<int>(i)).bytes();
      spans.emplace_back(buffer.data() + offset, b);
      offset += b;
    }
    RETURN_IF_ERROR(read_anchor_tensors(dir, m, batch, spans, pool));
    for (size_t k = 0; k < batch.size(); ++k) {
      RETURN_IF_ERROR(scatter_tensor(spans[k], views[batch[k]]));
      written += spans[k].size();
    }
  }
  if (bytes_written != nullptr) *bytes_written += written;
  return ok_status();
}

}  // namespace weightcast
