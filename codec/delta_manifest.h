// Describing delta records as the protobuf manifest messages of proto/ (delta_manifest.proto):
// what `weightcast delta inspect` prints and what a step manifest stores per record.
#pragma once

#include "codec/base/status.h"
#include "codec/delta_format.h"
#include "codec/tensor_slice.h"
#include "weightcast/delta_manifest.pb.h"

namespace weightcast {

// Summarises a parsed record, including each chunk's mode, sizes and value width. Fails only
// when a chunk header is malformed (the record was parsed without checking chunks).
Result<proto::DeltaRecordInfo> describe_delta_record(const DeltaRecordView& record);

proto::DType dtype_to_proto(DType dtype);
// kDataLoss for DTYPE_UNSPECIFIED and values this build does not know (manifests are input).
Result<DType> dtype_from_proto(proto::DType dtype);

// A slice of a tensor (tensor_slice.h) and its manifest form; a slice read from a manifest is
// checked against its tensor's shape (check_slice) before use.
proto::TensorSliceSpec slice_to_proto(const TensorSlice& slice);
TensorSlice slice_from_proto(const proto::TensorSliceSpec& spec);

}  // namespace weightcast
