// Internal to the safetensors codec, not API (that is codec/formats/safetensors_format.h): what the
// writer (safetensors_writer.cc), the header reader (safetensors_header_reader.cc) and the file
// layout code (safetensors_format.cc, which defines all of these) share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "codec/formats/safetensors_format.h"

namespace weightcast::safetensors_internal {

inline constexpr std::string_view kMetadataKey = "__metadata__";
inline constexpr size_t kLengthPrefixBytes = 8;

// Position of `safetensors_name` in the reference `Dtype` enum (safetensors/src/tensor.rs),
// whose declaration order is increasing alignment and whose derived Ord is what the reference
// serializer sorts by; -1 for a name the reference does not know.
int reference_dtype_rank(std::string_view safetensors_name);

std::string shape_text(const std::vector<int64_t>& shape);

// Index of the first byte that is not well-formed UTF-8, or npos. The definition is Unicode's
// (and Rust's str::from_utf8, which the reference uses): no overlong forms, no surrogates,
// nothing above U+10FFFF, no truncated sequences.
size_t find_invalid_utf8(std::string_view s);

// Outside text made safe for a message, which must stay valid UTF-8 whatever the input:
// control bytes and bytes that are not UTF-8 become \xNN; at most `max_bytes` of `s` are shown.
std::string printable(std::string_view s, size_t max_bytes = std::string_view::npos);

// A name from a file, quoted for a message; a long one is shortened.
std::string quote_name(std::string_view s);

// Bytes of a tensor, or an error naming it. `code` is the caller's: the writer's caller or the
// file is to blame.
Result<uint64_t> tensor_byte_size(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape, StatusCode code);

// The reference's Metadata::validate plus the end-of-file check: each tensor's byte range
// matches its shape and dtype, and the ranges sorted by (begin, end) tile [0, data size)
// exactly: no gap, no overlap, nothing after the last one, nothing missing.
Status validate_data_ranges(const SafetensorsHeader& h);

}  // namespace weightcast::safetensors_internal
