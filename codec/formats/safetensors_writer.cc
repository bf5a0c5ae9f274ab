// The safetensors writer: plan_safetensors orders the tensors and emits the header JSON as the
// reference serializer does; write_safetensors streams the header and the tensor bytes.
#include "codec/formats/safetensors_format.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "codec/base/byte_io.h"
#include "codec/formats/safetensors_header_reader.h"

namespace weightcast {

using safetensors_internal::find_invalid_utf8;
using safetensors_internal::kLengthPrefixBytes;
using safetensors_internal::kMetadataKey;
using safetensors_internal::quote_name;
using safetensors_internal::reference_dtype_rank;
using safetensors_internal::shape_text;
using safetensors_internal::tensor_byte_size;

namespace {

// A JSON string exactly as serde_json writes it (the reference's serializer): short escapes
// for \b \f \n \r \t, \u00xx with lowercase hex for other control bytes, '"' and '\\'
// escaped, everything else (DEL, '/', non-ASCII) verbatim.
void append_json_string(std::string* out, std::string_view s) {
  constexpr std::string_view kEscaped = "\"\\\b\f\n\r\t", kLetters = "\"\\bfnrt";
  out->push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (const size_t k = kEscaped.find(ch); k != std::string_view::npos) {
      out->push_back('\\');
      out->push_back(kLetters[k]);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      *out += buf;
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

void append_decimal(std::string* out, uint64_t v) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
  out->append(buf, end);
}

Status check_writer_string(std::string_view what, std::string_view s) {
  if (const size_t bad = find_invalid_utf8(s); bad != std::string_view::npos) {
    return invalid_argument("plan_safetensors: " + std::string(what) + " " + quote_name(s) +
                            " is not valid UTF-8 at byte " + std::to_string(bad));
  }
  return ok_status();
}

}  // namespace

Result<SafetensorsLayout> plan_safetensors(std::vector<SafetensorsTensorSpec> tensors,
                                           const std::map<std::string, std::string>& metadata,
                                           const SafetensorsLimits& limits) {
  if (tensors.size() > limits.max_tensors) {
    return invalid_argument("plan_safetensors: " + std::to_string(tensors.size()) +
                            " tensors exceed the limit of " + std::to_string(limits.max_tensors));
  }
  std::unordered_set<std::string_view> names;
  for (const auto& t : tensors) {
    if (t.name.empty()) return invalid_argument("plan_safetensors: a tensor has an empty name");
    if (t.name == kMetadataKey) {
      return invalid_argument(
          "plan_safetensors: the tensor name '__metadata__' is reserved for "
          "the header's metadata");
    }
    if (t.name.size() > limits.max_name_bytes) {
      return invalid_argument("plan_safetensors: tensor name " + quote_name(t.name) +
                              " exceeds the limit of " + std::to_string(limits.max_name_bytes) +
                              " bytes");
    }
    RETURN_IF_ERROR(check_writer_string("tensor name", t.name));
    if (!names.insert(t.name).second) {
      return invalid_argument("plan_safetensors: two tensors are named " + quote_name(t.name));
    }
    if (t.shape.size() > limits.max_rank) {
      return invalid_argument("plan_safetensors: tensor " + quote_name(t.name) + " has " +
                              std::to_string(t.shape.size()) + " dimensions, over the limit of " +
                              std::to_string(limits.max_rank));
    }
  }
  for (const auto& [key, value] : metadata) {
    RETURN_IF_ERROR(check_writer_string("metadata key", key));
    RETURN_IF_ERROR(check_writer_string("metadata value of " + quote_name(key), value));
  }
  // The reference order: dtype rank descending (largest alignment first), then name bytewise
  // (std::string compares as unsigned char, like Rust's String); ranks looked up once.
  std::vector<std::pair<int, size_t>> order;
  order.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    order.emplace_back(reference_dtype_rank(dtype_info(tensors[i].dtype).safetensors), i);
  }
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : tensors[a.second].name < tensors[b.second].name;
  });

  SafetensorsLayout layout;
  layout.tensors.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& ranked : order) {
    SafetensorsTensorSpec& t = tensors[ranked.second];
    auto bytes = tensor_byte_size(t.name, t.dtype, t.shape, StatusCode::kInvalidArgument);
    if (!bytes.ok()) return bytes.status().with_context("plan_safetensors");
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, *bytes, &end)) {
      return invalid_argument("plan_safetensors: the data section overflows 2^64 bytes at tensor " +
                              quote_name(t.name));
    }
    layout.tensors.push_back({std::move(t.name), t.dtype, std::move(t.shape), offset, end});
    offset = end;
  }

  // Compact JSON as serde_json writes the reference's Metadata: "__metadata__" first (only
  // when there is some), then the tensors in data order, fields in declaration order.
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) json += ',';
      first = false;
      append_json_string(&json, key);
      json += ':';
      append_json_string(&json, value);
    }
    json += '}';
  }
  for (const auto& t : layout.tensors) {
    if (json.size() > 1) json += ',';
    append_json_string(&json, t.name);
    json += ":{\"dtype\":";
    append_json_string(&json, dtype_info(t.dtype).safetensors);
    json += ",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) json += ',';
      append_decimal(&json, static_cast<uint64_t>(t.shape[d]));  // checked non-negative
    }
    json += "],\"data_offsets\":[";
    append_decimal(&json, t.data_begin);
    json += ',';
    append_decimal(&json, t.data_end);
    json += "]}";
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  if (json.size() > limits.max_header_bytes) {
    return invalid_argument("plan_safetensors: the header of " + std::to_string(json.size()) +
                            " bytes exceeds the limit of " +
                            std::to_string(limits.max_header_bytes));
  }

  layout.header.reserve(kLengthPrefixBytes + json.size());
  append_le<uint64_t>(&layout.header, json.size());
  layout.header.insert(layout.header.end(), json.begin(), json.end());
  layout.data_offset = layout.header.size();
  if (__builtin_add_overflow(layout.data_offset, offset, &layout.file_size)) {
    return invalid_argument("plan_safetensors: the file size overflows 2^64 bytes");
  }
  return layout;
}

Status write_safetensors(const SafetensorsLayout& layout,
                         std::span<const TensorBytesView> tensors_by_name_any_order,
                         const ByteSink& sink) {
  std::unordered_map<std::string_view, const TensorBytesView*> by_name;
  for (const auto& v : tensors_by_name_any_order) {
    if (!by_name.emplace(v.name, &v).second) {
      return invalid_argument("write_safetensors: two views for tensor " + quote_name(v.name));
    }
  }
  // Check everything before the first byte goes out, so a refused write writes nothing.
  std::vector<const TensorBytesView*> ordered;
  ordered.reserve(layout.tensors.size());
  for (const auto& t : layout.tensors) {
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      return invalid_argument("write_safetensors: no bytes given for tensor " + quote_name(t.name));
    }
    const TensorBytesView& v = *it->second;
    if (v.dtype != t.dtype || v.shape != t.shape || v.bytes.size() != t.data_end - t.data_begin) {
      return invalid_argument(
          "write_safetensors: tensor " + quote_name(t.name) + " was planned as " +
          std::string(dtype_info(t.dtype).safetensors) + " " + shape_text(t.shape) + " of " +
          std::to_string(t.data_end - t.data_begin) + " bytes but the view is " +
          std::string(dtype_info(v.dtype).safetensors) + " " + shape_text(v.shape) + " of " +
          std::to_string(v.bytes.size()) + " bytes");
    }
    ordered.push_back(&v);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return invalid_argument("write_safetensors: tensor " + quote_name(by_name.begin()->first) +
                            " is not in the layout");
  }
  RETURN_IF_ERROR(sink(layout.header));
  for (const TensorBytesView* v : ordered) {
    if (!v->bytes.empty()) RETURN_IF_ERROR(sink(v->bytes));
  }
  return ok_status();
}

}  // namespace weightcast
