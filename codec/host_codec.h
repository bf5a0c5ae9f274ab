// The codec's host implementations of the entry points that take tensor views: the codec
// library's device dispatch (device_dispatch.cc) calls these for host memory and the CUDA
// codec (cuda_codec.h) for device memory, so that the host codec never names the CUDA one and
// the libraries link one way: core <- cuda <- dispatch (docs/ARCHITECTURE.md, "Libraries").
// Contracts as for the dispatching functions in checksum.h, delta_apply.h and delta_encoder.h;
// the views must be in host memory.
#pragma once

#include <cstdint>

#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"

namespace weightcast {

Result<uint64_t> checksum_view_host(const TensorRef& view, uint64_t first_index, ThreadPool* pool);
Result<ApplyReport> apply_delta_host(const DeltaRecordView& record, const TensorRef& dest,
                                     const ApplyOptions& options);
[[nodiscard]] Status revert_delta_host(const DeltaRecordView& record, const TensorRef& dest,
                                       const ApplyUndo& undo, const ApplyOptions& options);
Result<EncodedDelta> encode_delta_views_host(const TensorRef& old_view, const TensorRef& new_view,
                                             const EncodeOptions& options);

}  // namespace weightcast
