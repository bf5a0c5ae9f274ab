// The codec's entry points that take tensor views, each sending a view to the host codec
// (host_codec.h) or, in CUDA memory, to the CUDA codec (cuda_codec.h; without the toolkit its
// stand-in, cuda_codec_absent.cc, refuses by name). The only place the two meet.
#include "codec/cuda_codec.h"
#include "codec/host_codec.h"

namespace weightcast {

Result<uint64_t> checksum_view(const TensorRef& view, uint64_t first_index, ThreadPool* pool) {
  if (view.memory == MemoryKind::kCuda) {
    RETURN_IF_ERROR(view.validate());
    return cuda_codec::checksum_view(view, first_index);
  }
  return checksum_view_host(view, first_index, pool);
}

Result<ApplyReport> apply_delta(const DeltaRecordView& record, const TensorRef& dest,
                                const ApplyOptions& options) {
  if (dest.memory == MemoryKind::kCuda) return cuda_codec::apply_delta(record, dest, options);
  return apply_delta_host(record, dest, options);
}

Status revert_delta(const DeltaRecordView& record, const TensorRef& dest, const ApplyUndo& undo,
                    const ApplyOptions& options) {
  if (dest.memory == MemoryKind::kCuda) {
    return cuda_codec::revert_delta(record, dest, undo, options);
  }
  return revert_delta_host(record, dest, undo, options);
}

Result<EncodedDelta> encode_delta_views(const TensorRef& old_view, const TensorRef& new_view,
                                        const EncodeOptions& options) {
  if (old_view.memory == MemoryKind::kCuda || new_view.memory == MemoryKind::kCuda) {
    if (options.slice != nullptr) {
      return invalid_argument("tensor '" + options.name + "': a record of slice " +
                              describe_slice(options.slice->slice) +
                              " is encoded from host memory; copy the CUDA views to the host");
    }
    return cuda_codec::encode_delta(old_view, new_view, options);
  }
  return encode_delta_views_host(old_view, new_view, options);
}

}  // namespace weightcast
