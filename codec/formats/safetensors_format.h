// The safetensors file format (huggingface/safetensors), as pure computation on byte buffers.
// File mapping and streaming live in wrappers above this API.
//
//   file = u64 little-endian N, N bytes of UTF-8 JSON (the header), the data section
//   header = {"__metadata__": {str: str}?, NAME: {"dtype": "BF16", "shape": [..],
//             "data_offsets": [begin, end]}, ...}
//
// Offsets in data_offsets are relative to the data section, which starts at file offset 8 + N.
//
// Writer: byte-identical to the reference `safetensors` serializer (Rust crate, also used by
// the Python package) for the same tensors and at most one metadata entry: tensors in data
// order sorted by dtype rank descending and then by name bytewise, rank being the position of
// the dtype in the reference `Dtype` enum, which lists dtypes in increasing alignment (BOOL,
// U8, I8, F8_E5M2, F8_E4M3, I16, F16, BF16, I32, F32, F64, I64 for the dtypes weightcast has);
// compact JSON ("__metadata__" first, then tensors in data order, each with dtype, shape,
// data_offsets); JSON padded with spaces to a multiple of 8 bytes so the data section starts
// 8-byte aligned. The reference emits metadata entries in hash-map order; ours are sorted.
//
// Reader: accepts what the reference reader accepts and rejects what it rejects, plus:
// duplicate JSON keys (the reference keeps the last silently), empty tensor names, and the
// limits below. Like the reference, it ignores unknown fields inside a tensor entry (they are
// dropped on re-serialisation) and treats "__metadata__": null as no metadata. Every error
// names the tensor and the offsets involved. Corrupt or hostile files give kDataLoss (the
// limits included: the file is the culprit); valid safetensors dtypes that weightcast does not
// have (U16, F8_E8M0, ...) give kUnimplemented.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

// What a reader accepts (and a writer refuses to produce beyond). Outside input is hostile.
struct SafetensorsLimits {
  uint64_t max_header_bytes = 100'000'000;  // the reference reader's MAX_HEADER_SIZE
  size_t max_tensors = 10'000'000;
  size_t max_rank = 64;
  size_t max_name_bytes = 4096;  // the delta record's limit, so every name can be carried on
};

// One tensor's place in a file. data_begin/data_end are the JSON data_offsets: relative to
// the data section (absolute file offset = data_offset + data_begin).
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;
  uint64_t data_end = 0;
};

// ---- Writer ----

struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// A planned file: everything but the tensor bytes.
struct SafetensorsLayout {
  std::vector<uint8_t> header;  // the 8-byte length prefix, JSON and padding; size data_offset
  std::vector<SafetensorsTensorInfo> tensors;  // in data order
  uint64_t data_offset = 0;                    // 8 + JSON length; a multiple of 8
  uint64_t file_size = 0;                      // data_offset + the sum of tensor byte sizes
};

// Orders the tensors as the reference does and builds the header. Fails with
// kInvalidArgument, naming the tensor, on an empty name, the name "__metadata__", a duplicate
// name, a name or metadata string that is not UTF-8, a negative dimension, a byte size that
// overflows, or anything beyond `limits` (the reader of the result would refuse it).
Result<SafetensorsLayout> plan_safetensors(std::vector<SafetensorsTensorSpec> tensors,
                                           const std::map<std::string, std::string>& metadata,
                                           const SafetensorsLimits& limits = {});

// Streams layout.header and then every tensor's bytes in data order into `sink`. `tensors`
// holds exactly one view per planned tensor, in any order, with the planned dtype, shape and
// byte count (kInvalidArgument naming the tensor otherwise; nothing is written then). A sink
// error stops the write and is returned unchanged.
Status write_safetensors(const SafetensorsLayout& layout,
                         std::span<const TensorBytesView> tensors_by_name_any_order,
                         const ByteSink& sink);

// ---- Reader ----

// The JSON byte count N from the first 8 bytes, checked against the limit and against
// `file_size`. `file_prefix` needs at least 8 bytes. For streaming readers: read 8 + N bytes,
// then call parse_safetensors_header.
Result<uint64_t> read_safetensors_header_length(std::span<const uint8_t> file_prefix,
                                                uint64_t file_size,
                                                const SafetensorsLimits& limits = {});

// A validated header: every check of parse_safetensors, with the data section's size taken
// from `file_size` instead of from bytes in memory.
struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsTensorInfo> tensors;                // in header (JSON) order
  std::map<std::string, size_t, std::less<>> index_by_name;  // into `tensors`
  uint64_t data_offset = 0;                                  // 8 + N
  uint64_t file_size = 0;

  const SafetensorsTensorInfo* find(std::string_view name) const;
};

// `file_prefix` holds at least the first 8 + N bytes of a file of `file_size` bytes (more is
// fine and ignored). A prefix shorter than that in a file long enough is kInvalidArgument.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> file_prefix,
                                                   uint64_t file_size,
                                                   const SafetensorsLimits& limits = {});

// A whole file in memory. The views point into the buffer given to parse_safetensors, which
// must outlive this value.
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<TensorBytesView> tensors;                      // in header (JSON) order
  std::map<std::string, size_t, std::less<>> index_by_name;  // into `tensors`
  uint64_t data_offset = 0;

  const TensorBytesView* find(std::string_view name) const;
};

Result<SafetensorsFile> parse_safetensors(std::span<const uint8_t> file,
                                          const SafetensorsLimits& limits = {});

}  // namespace weightcast
