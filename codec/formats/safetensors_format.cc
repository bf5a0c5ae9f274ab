// The safetensors file layout around the JSON header: the rules the writer and the header
// reader share (dtype ranks, UTF-8, message text, tensor byte sizes), the 8-byte length prefix,
// the data section's tiling, and whole files in memory.
#include "codec/formats/safetensors_format.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <tuple>

#include "codec/base/byte_io.h"
#include "codec/formats/safetensors_header_reader.h"

namespace weightcast {
namespace safetensors_internal {
namespace {

// The reference `Dtype` enum (safetensors/src/tensor.rs), in its declaration order, which is
// increasing alignment; its derived Ord is what the reference serializer sorts by. weightcast
// has a subset; the others make a file valid but unsupported here.
constexpr std::string_view kReferenceDtypes[] = {
    "BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
    "U32",     "F32",         "C64",         "F64",     "I64", "U64"};

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Length of the well-formed UTF-8 sequence at s[i], or 0 if there is none. The definition is
// Unicode's (and Rust's str::from_utf8, which the reference uses): no overlong forms, no
// surrogates, nothing above U+10FFFF, no truncated sequences.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) return 1;
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;  // overlong
    if (c == 0xed) hi = 0x9f;  // UTF-16 surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;  // overlong
    if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
  }
  if (s.size() - i < len) return 0;
  const auto c1 = static_cast<uint8_t>(s[i + 1]);
  if (c1 < lo || c1 > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((static_cast<uint8_t>(s[i + k]) & 0xc0) != 0x80) return 0;
  }
  return len;
}

}  // namespace

int reference_dtype_rank(std::string_view safetensors_name) {
  const auto* it =
      std::find(std::begin(kReferenceDtypes), std::end(kReferenceDtypes), safetensors_name);
  return it == std::end(kReferenceDtypes) ? -1 : static_cast<int>(it - kReferenceDtypes);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

size_t find_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(s, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string printable(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes;) {
    const size_t len = utf8_sequence_length(s, i);
    const auto c = static_cast<uint8_t>(s[i]);
    if (len == 0 || c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
      ++i;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string quote_name(std::string_view s) {
  constexpr size_t kShown = 160;
  if (s.size() <= kShown) return "'" + printable(s) + "'";
  return "'" + printable(s, kShown) + "...' (" + std::to_string(s.size()) + " bytes)";
}

Result<uint64_t> tensor_byte_size(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape, StatusCode code) {
  auto numel = shape_numel(shape, std::string());  // the message is built only on failure
  if (!numel.ok()) {
    return Status(code, shape_numel(shape, "tensor " + quote_name(name)).status().message());
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(*numel, dtype_size(dtype), &bytes)) {
    return Status(code, "tensor " + quote_name(name) + ": shape " + shape_text(shape) + " of " +
                            std::string(dtype_info(dtype).safetensors) +
                            " has more than 2^64 bytes");
  }
  return bytes;
}

Status validate_data_ranges(const SafetensorsHeader& h) {
  const uint64_t data_bytes = h.file_size - h.data_offset;
  for (const auto& t : h.tensors) {
    if (t.data_begin > t.data_end) {
      return data_loss("tensor " + quote_name(t.name) + ": data_offsets " +
                       range_text(t.data_begin, t.data_end) + " end before they begin");
    }
    ASSIGN_OR_RETURN(const uint64_t bytes,
                     tensor_byte_size(t.name, t.dtype, t.shape, StatusCode::kDataLoss));
    if (bytes != t.data_end - t.data_begin) {
      return data_loss("tensor " + quote_name(t.name) + ": shape " + shape_text(t.shape) + " of " +
                       std::string(dtype_info(t.dtype).safetensors) + " needs " +
                       std::to_string(bytes) + " bytes but data_offsets " +
                       range_text(t.data_begin, t.data_end) + " hold " +
                       std::to_string(t.data_end - t.data_begin));
    }
  }
  std::vector<size_t> order(h.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &ta = h.tensors[a], &tb = h.tensors[b];
    return std::tie(ta.data_begin, ta.data_end) < std::tie(tb.data_begin, tb.data_end);
  });
  uint64_t expected = 0;
  const SafetensorsTensorInfo* prev = nullptr;
  for (const size_t i : order) {
    const auto& t = h.tensors[i];
    const auto here = [&t] {
      return "tensor " + quote_name(t.name) + " " + range_text(t.data_begin, t.data_end);
    };
    if (prev == nullptr && t.data_begin != 0) {
      return data_loss(here() +
                       " is the first in the data section but does not start at "
                       "offset 0: data bytes [0, " +
                       std::to_string(t.data_begin) + ") belong to no tensor");
    }
    if (prev != nullptr && t.data_begin > expected) {
      return data_loss("gap: data bytes [" + std::to_string(expected) + ", " +
                       std::to_string(t.data_begin) + ") between tensor " + quote_name(prev->name) +
                       " " + range_text(prev->data_begin, prev->data_end) + " and " + here() +
                       " belong to no tensor");
    }
    if (prev != nullptr && t.data_begin < expected) {
      return data_loss("overlap: " + here() + " overlaps tensor " + quote_name(prev->name) + " " +
                       range_text(prev->data_begin, prev->data_end));
    }
    expected = t.data_end;
    prev = &t;
  }
  if (expected < data_bytes) {
    return data_loss(std::to_string(data_bytes - expected) +
                     " trailing bytes: the tensors' data ends at data offset " +
                     std::to_string(expected) + " (file offset " +
                     std::to_string(h.data_offset + expected) + ") but the file has " +
                     std::to_string(h.file_size) + " bytes");
  }
  if (expected > data_bytes) {
    return data_loss("truncated: tensor " + quote_name(prev->name) + " " +
                     range_text(prev->data_begin, prev->data_end) + " ends " +
                     std::to_string(expected - data_bytes) + " bytes past the end of the file (" +
                     std::to_string(data_bytes) + " data bytes after the header at file offset " +
                     std::to_string(h.data_offset) + ")");
  }
  return ok_status();
}

}  // namespace safetensors_internal

using safetensors_internal::kLengthPrefixBytes;

Result<uint64_t> read_safetensors_header_length(std::span<const uint8_t> file_prefix,
                                                uint64_t file_size,
                                                const SafetensorsLimits& limits) {
  if (file_size < kLengthPrefixBytes) {
    return data_loss("safetensors file of " + std::to_string(file_size) +
                     " bytes is shorter than its 8-byte header length");
  }
  if (file_prefix.size() < kLengthPrefixBytes) {
    return invalid_argument("read_safetensors_header_length: needs the first 8 bytes, got " +
                            std::to_string(file_prefix.size()));
  }
  const auto n = load_le<uint64_t>(file_prefix.data());
  if (n > limits.max_header_bytes) {
    return data_loss("safetensors header length " + std::to_string(n) + " exceeds the limit of " +
                     std::to_string(limits.max_header_bytes) + " bytes");
  }
  if (n > file_size - kLengthPrefixBytes) {
    return data_loss("safetensors header length " + std::to_string(n) + " is larger than the " +
                     std::to_string(file_size - kLengthPrefixBytes) +
                     " bytes after the length field");
  }
  return n;
}

Result<SafetensorsFile> parse_safetensors(std::span<const uint8_t> file,
                                          const SafetensorsLimits& limits) {
  ASSIGN_OR_RETURN(SafetensorsHeader h, parse_safetensors_header(file, file.size(), limits));
  SafetensorsFile f;
  f.metadata = std::move(h.metadata);
  f.index_by_name = std::move(h.index_by_name);
  f.data_offset = h.data_offset;
  f.tensors.reserve(h.tensors.size());
  for (auto& t : h.tensors) {
    f.tensors.push_back({std::move(t.name), t.dtype, std::move(t.shape),
                         file.subspan(h.data_offset + t.data_begin, t.data_end - t.data_begin)});
  }
  return f;
}

const TensorBytesView* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_by_name.find(name);
  return it == index_by_name.end() ? nullptr : &tensors[it->second];
}

}  // namespace weightcast
