// The publisher's snapshot tensors that cannot be read where they live (strided views, CUDA
// memory, an FP8 group's quantised values): read in bounded pieces of whole rows into a
// staging buffer, each piece diffed against the snapshot (codec/delta_recorder.h, the same
// chunks encode_delta makes) and then copied over it. The snapshot is the one copy of such a
// tensor; no gathered copy of the whole tensor is made.
#include <algorithm>
#include <cstring>
#include <string>

#include "codec/base/allocation.h"
#include "codec/cuda_codec.h"
#include "codec/delta_recorder.h"
#include "codec/fp8_quantize.h"
#include "src/endpoint/publisher.h"
#include "transport/tensor_staging.h"

namespace weightcast {
namespace {

constexpr uint64_t kFp8PieceBytes = uint64_t{4} << 20;

}  // namespace

Status Publisher::read_staged(size_t i, uint64_t version, bool from_snapshot,
                              std::optional<EncodedDelta>* record, bool* wide_changed) {
  const TensorRef& t = tensors_[i];
  const size_t es = t.element_size();
  std::span<uint8_t> snapshot(previous_[i]);
  std::unique_ptr<DeltaRecorder> recorder;
  const proto::StepManifest* head = writer_->head_manifest();
  if (from_snapshot && es != 8 && head != nullptr &&
      head->tensors_size() == static_cast<int>(tensors_.size()) &&
      head->tensors(static_cast<int>(i)).name() == t.name) {
    EncodeOptions e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.base_version = version - 1;
    e.target_version = version;
    e.base_checksum = head->tensors(static_cast<int>(i)).checksum();
    ASSIGN_OR_RETURN(recorder, DeltaRecorder::create(e, t.numel()));
  }
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const uint64_t row_elements = rows == 0 ? 0 : t.numel() / static_cast<uint64_t>(rows);
  // FP8 values are quantised from their source in whole 128-row blocks (publisher_fp8.cc),
  // into pieces of at most kFp8PieceBytes: the quantiser needs no large transfers, and the
  // publisher of an FP8 group then holds little more than its FP8 snapshot.
  const bool fp8 = i < fp8_of_.size() && fp8_of_[i] >= 0;
  const uint64_t piece_bytes =
      fp8 ? std::min(options_.staged_piece_bytes, kFp8PieceBytes) : options_.staged_piece_bytes;
  int64_t rows_per_piece = static_cast<int64_t>(
      std::max<uint64_t>(1, piece_bytes / std::max<uint64_t>(1, row_elements * es)));
  if (fp8) rows_per_piece = std::max<int64_t>(1, rows_per_piece / kFp8Block) * kFp8Block;
  for (int64_t r = 0; r < rows; r += rows_per_piece) {
    const int64_t n = std::min(rows_per_piece, rows - r);
    const TensorRef piece = t.rows(r, n);
    const uint64_t first = static_cast<uint64_t>(r) * row_elements;
    const uint64_t count = piece.numel();
    if (staging_.size() < count * es) {
      ASSIGN_OR_RETURN(staging_, allocate_bytes(count * es, "the publisher's staging of tensor '" +
                                                                t.name + "'"));
    }
    const std::span<uint8_t> staged(staging_.data(), count * es);
    RETURN_IF_ERROR(fp8 ? quantize_rows(i, r, n, staged) : gather_tensor(piece, staged));
    uint8_t* old_bytes = snapshot.data() + first * es;
    if (recorder) RETURN_IF_ERROR(recorder->record(first, count, old_bytes, staged.data()));
    if (es == 8 && std::memcmp(old_bytes, staged.data(), staged.size()) != 0) *wide_changed = true;
    std::memcpy(old_bytes, staged.data(), staged.size());
  }
  if (recorder) {
    ASSIGN_OR_RETURN(EncodedDelta done, recorder->finish());
    *record = std::move(done);
  }
  return ok_status();
}

Status Publisher::read_device(size_t i, uint64_t version, bool from_snapshot,
                              std::optional<EncodedDelta>* record) {
  DeviceSnapshot& snapshot = *device_snapshots_[i];
  if (from_snapshot) {
    // The base checksum is computed from the snapshot, not taken from the manifest, so that a
    // snapshot that drifted from the head is caught (docs/DECISIONS.md "The publisher's one
    // copy").
    EncodeOptions e;
    e.name = tensors_[i].name;
    e.dtype = tensors_[i].dtype;
    e.base_version = version - 1;
    e.target_version = version;
    ASSIGN_OR_RETURN(EncodedDelta done, cuda_codec::encode_delta(snapshot.view(), tensors_[i], e));
    *record = std::move(done);
  }
  return snapshot.copy_from_live();
}

}  // namespace weightcast
