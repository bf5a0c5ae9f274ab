// The codec on CUDA memory (codec/checksum.h, codec/delta_apply.h): the tensor checksum, sparse
// delta encode and delta apply, computed on the GPU that holds the tensor, bit-identical to the CPU
// codec (a record made on either side applies on the other). The public entry points of the codec
// (checksum_view, encode_delta_views, apply_delta) dispatch here when a TensorRef's memory is
// MemoryKind::kCuda; call these directly only to pass a record that is already in device memory.
//
// The kernels live in the weightcast_codec_cuda target (codec/cuda/), built whenever nvcc is
// found; without it every function here fails with a clear "built without CUDA" error.
// Every CUDA call is checked; errors name the call, the tensor and CUDA's message.
//
// Work runs on a per-thread, per-device stream with cached scratch (codec/cuda/workspace.h):
// the delta paths need 8 bytes of scratch per element of the range for positions and values,
// and apply another element size per element to undo raw chunks.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "codec/base/status.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/tensor_ref.h"

namespace weightcast::cuda_codec {

// Whether this build has the CUDA codec and a device is usable; `why` says why not.
bool device_usable(std::string* why);

// C() of a CUDA view (any strides): element k has global index first_index + k.
Result<uint64_t> checksum_view(const TensorRef& view, uint64_t first_index);

// The delta from `old_view` to `new_view`: contiguous CUDA tensors of the same device, dtype
// (1-, 2- or 4-byte elements) and element count. The record is returned in host memory,
// byte-identical to encode_delta on the same bytes and options.
Result<EncodedDelta> encode_delta(const TensorRef& old_view, const TensorRef& new_view,
                                  const EncodeOptions& options);

// apply_delta (delta_apply.h) into a CUDA destination: same checks, same errors, same
// guarantees (refuse before writing, verify, revert). `record` is parsed in host memory;
// `device_record`, when given, is a copy of the same record bytes in the destination's device
// memory, used instead of copying the chunks from the host.
Result<ApplyReport> apply_delta(const DeltaRecordView& record, const TensorRef& dest,
                                const ApplyOptions& options,
                                const uint8_t* device_record = nullptr);

// revert_delta (delta_apply.h) of a CUDA destination: decodes the record's chunks again on the
// GPU, subtracts their differences and writes the raw chunks' saved bits back.
[[nodiscard]] Status revert_delta(const DeltaRecordView& record, const TensorRef& dest,
                                  const ApplyUndo& undo, const ApplyOptions& options);

// quantize_fp8_blocks (codec/fp8_quantize.h) of a 2-D CUDA view (bf16, fp16 or fp32, any
// strides) on its GPU: the values and scales land in host memory, byte-identical to the CPU
// quantiser's; only they leave the GPU (one byte per element, 4 per block).
[[nodiscard]] Status quantize_fp8_blocks(const TensorRef& in, std::span<uint8_t> q,
                                         std::span<float> scale_inv);

}  // namespace weightcast::cuda_codec
