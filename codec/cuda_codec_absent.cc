// The CUDA codec's entry points in a build without the CUDA toolkit: each says so.
#include "codec/cuda_codec.h"

namespace weightcast::cuda_codec {
namespace {

Status absent(const std::string& name) {
  return failed_precondition("tensor '" + name +
                             "' is in CUDA memory but weightcast was built without the CUDA "
                             "toolkit (WEIGHTCAST_HAVE_CUDA=0): stage it to host memory first");
}

}  // namespace

bool device_usable(std::string* why) {
  if (why != nullptr) *why = "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
  return false;
}

Result<uint64_t> checksum_view(const TensorRef& view, uint64_t) {
  return absent(view.name);
}

Result<EncodedDelta> encode_delta(const TensorRef& old_view, const TensorRef&,
                                  const EncodeOptions&) {
  return absent(old_view.name);
}

Result<ApplyReport> apply_delta(const DeltaRecordView& record, const TensorRef&,
                                const ApplyOptions&, const uint8_t*) {
  return absent(record.header.name);
}

Status revert_delta(const DeltaRecordView& record, const TensorRef&, const ApplyUndo&,
                    const ApplyOptions&) {
  return absent(record.header.name);
}

Status quantize_fp8_blocks(const TensorRef& in, std::span<uint8_t>, std::span<float>) {
  return absent(in.name);
}

}  // namespace weightcast::cuda_codec
