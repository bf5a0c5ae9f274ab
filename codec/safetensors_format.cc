#include "codec/safetensors_format.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "codec/byte_io.h"

namespace weightcast {
namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr size_t kLengthPrefixBytes = 8;

// The reference `Dtype` enum (safetensors/src/tensor.rs), in its declaration order, which is
// increasing alignment; its derived Ord is what the reference serializer sorts by. weightcast
// has a subset; the others make a file valid but unsupported here.
constexpr std::string_view kReferenceDtypes[] = {
    "BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
    "U32",     "F32",         "C64",         "F64",     "I64", "U64"};

// Position in kReferenceDtypes; -1 for a name the reference does not know.
int reference_dtype_rank(std::string_view safetensors_name) {
  const auto* it =
      std::find(std::begin(kReferenceDtypes), std::end(kReferenceDtypes), safetensors_name);
  return it == std::end(kReferenceDtypes) ? -1 : static_cast<int>(it - kReferenceDtypes);
}

// A name from a file, quoted for a message: control bytes escaped, long names shortened.
std::string quote_name(std::string_view s) {
  constexpr size_t kShown = 160;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kShown)
    out += "...' (" + std::to_string(s.size()) + " bytes)";
  else
    out += "'";
  return out;
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

// Index of the first byte that is not well-formed UTF-8, or npos. The definition is Unicode's
// (and Rust's str::from_utf8, which the reference uses): no overlong forms, no surrogates,
// nothing above U+10FFFF, no truncated sequences.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
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
      return i;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
    }
    if (s.size() - i < len) return i;
    const auto c1 = static_cast<uint8_t>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((static_cast<uint8_t>(s[i + k]) & 0xc0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

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

Status check_writer_string(std::string_view what, std::string_view s) {
  if (const size_t bad = find_invalid_utf8(s); bad != std::string_view::npos) {
    return invalid_argument("plan_safetensors: " + std::string(what) + " " + quote_name(s) +
                            " is not valid UTF-8 at byte " + std::to_string(bad));
  }
  return ok_status();
}

// Bytes of a tensor, or an error naming it. `code` is the caller's: the writer's caller or the
// file is to blame.
Result<uint64_t> tensor_byte_size(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape, StatusCode code) {
  auto numel = shape_numel(shape, "tensor " + quote_name(name));
  if (!numel.ok()) return Status(code, numel.status().message());
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(*numel, dtype_size(dtype), &bytes)) {
    return Status(code, "tensor " + quote_name(name) + ": shape " + shape_text(shape) + " of " +
                            std::string(dtype_info(dtype).safetensors) +
                            " has more than 2^64 bytes");
  }
  return bytes;
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
    for (size_t d = 0; d < t.shape.size(); ++d) json += (d ? "," : "") + std::to_string(t.shape[d]);
    json += "],\"data_offsets\":[" + std::to_string(t.data_begin) + "," +
            std::to_string(t.data_end) + "]}";
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

// ---- Reader ----

namespace {

// Reads the header JSON as nlohmann SAX events straight into a SafetensorsHeader: no DOM, one
// pass, and duplicate keys are seen (a DOM keeps the last one silently). Returning false stops
// the parse; `status` then says why.
class HeaderSax {
 public:
  HeaderSax(const SafetensorsLimits& limits, SafetensorsHeader* out) : limits_(limits), h_(out) {}

  Status status;

  bool null() { return value(Kind::kNull, nullptr, nullptr, "null"); }
  bool boolean(bool v) { return value(Kind::kBool, nullptr, nullptr, v ? "true" : "false"); }
  bool number_integer(int64_t v) {
    if (v >= 0) {
      const auto u = static_cast<uint64_t>(v);
      return value(Kind::kNumber, &u, nullptr, {});
    }
    const std::string text = std::to_string(v);
    return value(Kind::kNumber, nullptr, nullptr, text);
  }
  bool number_unsigned(uint64_t v) { return value(Kind::kNumber, &v, nullptr, {}); }
  bool number_float(double, const std::string& text) {
    return value(Kind::kNumber, nullptr, nullptr, text);
  }
  bool string(std::string& s) { return value(Kind::kString, nullptr, &s, {}); }
  bool binary(nlohmann::json::binary_t&) { return fail(internal_error("binary value in JSON")); }
  bool start_object(size_t) { return value(Kind::kObject, nullptr, nullptr, {}); }
  bool start_array(size_t) { return value(Kind::kArray, nullptr, nullptr, {}); }
  bool key(std::string& k);
  bool end_object();
  bool end_array();
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& e) {
    return fail(data_loss("safetensors header is not valid JSON (near file offset " +
                          std::to_string(kLengthPrefixBytes + position) + "): " + e.what()));
  }

 private:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  // Where in the header we are. *Keys states expect a key or the end of their object.
  enum class State {
    kTop,
    kTopKeys,
    kTopValue,
    kMetaKeys,
    kMetaValue,
    kEntryKeys,
    kDtype,
    kShape,
    kShapeDims,
    kOffsets,
    kOffsetItems,
    kSkip,
    kDone,
  };
  enum Field : unsigned { kSeenDtype = 1, kSeenShape = 2, kSeenOffsets = 4 };

  static const char* kind_name(Kind k) {
    static constexpr const char* kNames[] = {"null",   "boolean", "number",
                                             "string", "array",   "object"};
    return kNames[static_cast<int>(k)];
  }
  // "a JSON array", or the literal when there is one: "-3", "2.5", "true".
  static std::string found(Kind k, std::string_view text) {
    return text.empty() ? std::string("a JSON ") + kind_name(k) : std::string(text);
  }
  std::string who() const { return "tensor " + quote_name(entry_.name); }
  bool go(State next) {
    state_ = next;
    return true;
  }
  bool fail(Status s) {
    status = std::move(s);
    return false;
  }
  bool value(Kind kind, const uint64_t* count, std::string* str, std::string_view text);

  const SafetensorsLimits& limits_;
  SafetensorsHeader* h_;
  State state_ = State::kTop;
  bool in_metadata_ = false;  // the current top-level key is "__metadata__"
  bool seen_metadata_ = false;
  std::string meta_key_;
  SafetensorsTensorInfo entry_;
  unsigned seen_fields_ = 0;
  size_t offset_count_ = 0;
  std::set<std::string> entry_other_keys_;  // unknown fields of the entry (checked for repeats)
  size_t skip_depth_ = 0;                   // containers open inside a skipped unknown field
  std::vector<std::set<std::string>> skip_keys_;
};

bool HeaderSax::value(Kind kind, const uint64_t* count, std::string* str, std::string_view text) {
  const bool is_object = kind == Kind::kObject, is_array = kind == Kind::kArray;
  switch (state_) {
    case State::kTop:
      if (is_object) return go(State::kTopKeys);
      return fail(data_loss("safetensors header is " + found(kind, text) + ", not a JSON object"));
    case State::kTopValue:
      if (in_metadata_) {
        if (is_object) return go(State::kMetaKeys);
        if (kind == Kind::kNull) return go(State::kTopKeys);  // serde's None
        return fail(
            data_loss("__metadata__ is " + found(kind, text) + ", not an object of strings"));
      }
      if (is_object) return go(State::kEntryKeys);
      return fail(data_loss(who() + ": its header entry is " + found(kind, text) +
                            ", not an object with dtype, shape and data_offsets"));
    case State::kMetaValue:
      if (kind != Kind::kString) {
        return fail(data_loss("__metadata__ entry " + quote_name(meta_key_) + " is " +
                              found(kind, text) + ", not a string"));
      }
      h_->metadata.emplace(std::move(meta_key_), std::move(*str));
      return go(State::kMetaKeys);
    case State::kDtype: {
      if (kind != Kind::kString) {
        return fail(data_loss(who() + ": dtype is " + found(kind, text) + ", not a string"));
      }
      auto dtype = dtype_from_safetensors(*str);
      if (!dtype.ok()) {
        if (reference_dtype_rank(*str) >= 0) {
          return fail(Status(StatusCode::kUnimplemented, who() + ": safetensors dtype " +
                                                             quote_name(*str) +
                                                             " is not supported by weightcast"));
        }
        return fail(data_loss(who() + ": unknown safetensors dtype " + quote_name(*str)));
      }
      entry_.dtype = *dtype;
      return go(State::kEntryKeys);
    }
    case State::kShape:
      if (is_array) return go(State::kShapeDims);
      return fail(data_loss(who() + ": shape is " + found(kind, text) + ", not an array"));
    case State::kShapeDims:
      if (entry_.shape.size() >= limits_.max_rank) {
        return fail(data_loss(who() + ": shape has more than " + std::to_string(limits_.max_rank) +
                              " dimensions"));
      }
      if (count == nullptr || *count > uint64_t{INT64_MAX}) {
        return fail(data_loss(who() + ": shape dimension " + std::to_string(entry_.shape.size()) +
                              " is " + (count ? std::to_string(*count) : found(kind, text)) +
                              ", not a non-negative integer below 2^63"));
      }
      entry_.shape.push_back(static_cast<int64_t>(*count));
      return true;
    case State::kOffsets:
      if (is_array) return go(State::kOffsetItems);
      return fail(data_loss(who() + ": data_offsets is " + found(kind, text) +
                            ", not an array [begin, end]"));
    case State::kOffsetItems:
      if (count == nullptr) {
        return fail(data_loss(who() + ": data_offsets element " + std::to_string(offset_count_) +
                              " is " + found(kind, text) + ", not a non-negative integer"));
      }
      if (offset_count_ == 2) {
        return fail(data_loss(who() + ": data_offsets has more than 2 elements [begin, end]"));
      }
      (offset_count_++ == 0 ? entry_.data_begin : entry_.data_end) = *count;
      return true;
    case State::kSkip:  // the value of an unknown field, ignored as the reference does
      if (is_object) skip_keys_.emplace_back();
      if (is_object || is_array) ++skip_depth_;
      if (skip_depth_ == 0) state_ = State::kEntryKeys;
      return true;
    default:
      return fail(internal_error("safetensors header: value where a key was expected"));
  }
}

bool HeaderSax::key(std::string& k) {
  switch (state_) {
    case State::kTopKeys:
      in_metadata_ = k == kMetadataKey;
      state_ = State::kTopValue;
      if (in_metadata_) {
        if (seen_metadata_) return fail(data_loss("__metadata__ appears twice in the header"));
        seen_metadata_ = true;
        return true;
      }
      if (k.empty()) return fail(data_loss("a tensor in the header has an empty name"));
      if (k.size() > limits_.max_name_bytes) {
        return fail(data_loss("tensor name " + quote_name(k) + " exceeds the limit of " +
                              std::to_string(limits_.max_name_bytes) + " bytes"));
      }
      if (h_->index_by_name.size() >= limits_.max_tensors) {
        return fail(data_loss("the header lists more than " + std::to_string(limits_.max_tensors) +
                              " tensors"));
      }
      if (!h_->index_by_name.emplace(k, h_->tensors.size()).second) {
        return fail(
            data_loss("duplicate key: tensor " + quote_name(k) + " appears twice in the header"));
      }
      entry_ = SafetensorsTensorInfo{};
      entry_.name = std::move(k);
      seen_fields_ = 0;
      offset_count_ = 0;
      entry_other_keys_.clear();
      return true;
    case State::kMetaKeys:
      if (h_->metadata.contains(k)) {
        return fail(
            data_loss("duplicate key: __metadata__ entry " + quote_name(k) + " appears twice"));
      }
      meta_key_ = std::move(k);
      return go(State::kMetaValue);
    case State::kEntryKeys: {
      const unsigned field = k == "dtype"          ? kSeenDtype
                             : k == "shape"        ? kSeenShape
                             : k == "data_offsets" ? kSeenOffsets
                                                   : 0u;
      if (field == 0 ? !entry_other_keys_.insert(k).second : (seen_fields_ & field) != 0) {
        return fail(
            data_loss("duplicate key: " + who() + " has field " + quote_name(k) + " twice"));
      }
      seen_fields_ |= field;
      state_ = field == kSeenDtype   ? State::kDtype
               : field == kSeenShape ? State::kShape
               : field != 0          ? State::kOffsets
                                     : State::kSkip;
      return true;
    }
    case State::kSkip:
      if (!skip_keys_.back().insert(k).second) {
        return fail(data_loss("duplicate key: " + quote_name(k) +
                              " appears twice in an object inside " + who() + "'s header entry"));
      }
      return true;
    default:
      return fail(internal_error("safetensors header: key where a value was expected"));
  }
}

bool HeaderSax::end_object() {
  switch (state_) {
    case State::kTopKeys:
      return go(State::kDone);
    case State::kMetaKeys:
      return go(State::kTopKeys);
    case State::kEntryKeys:
      for (const auto& [bit, field] : {std::pair{kSeenDtype, "dtype"},
                                       {kSeenShape, "shape"},
                                       {kSeenOffsets, "data_offsets"}}) {
        if ((seen_fields_ & bit) == 0) return fail(data_loss(who() + ": missing " + field));
      }
      h_->tensors.push_back(std::move(entry_));
      return go(State::kTopKeys);
    case State::kSkip:
      skip_keys_.pop_back();
      if (--skip_depth_ == 0) state_ = State::kEntryKeys;
      return true;
    default:
      return fail(internal_error("safetensors header: unexpected end of object"));
  }
}

bool HeaderSax::end_array() {
  switch (state_) {
    case State::kShapeDims:
      return go(State::kEntryKeys);
    case State::kOffsetItems:
      if (offset_count_ != 2) {
        return fail(data_loss(who() + ": data_offsets has " + std::to_string(offset_count_) +
                              " elements, not 2 [begin, end]"));
      }
      return go(State::kEntryKeys);
    case State::kSkip:
      if (--skip_depth_ == 0) state_ = State::kEntryKeys;
      return true;
    default:
      return fail(internal_error("safetensors header: unexpected end of array"));
  }
}

// The reference's Metadata::validate plus the end-of-file check: each tensor's byte range
// matches its shape and dtype, and the ranges sorted by (begin, end) tile [0, data size)
// exactly: no gap, no overlap, nothing after the last one, nothing missing.
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

}  // namespace

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

Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> file_prefix,
                                                   uint64_t file_size,
                                                   const SafetensorsLimits& limits) {
  ASSIGN_OR_RETURN(const uint64_t n,
                   read_safetensors_header_length(file_prefix, file_size, limits));
  if (file_prefix.size() - kLengthPrefixBytes < n) {
    return invalid_argument("parse_safetensors_header: given " +
                            std::to_string(file_prefix.size()) + " bytes, the header needs " +
                            std::to_string(kLengthPrefixBytes + n));
  }
  const std::string_view json(reinterpret_cast<const char*>(file_prefix.data()) + 8, n);
  if (const size_t bad = find_invalid_utf8(json); bad != std::string_view::npos) {
    return data_loss("safetensors header is not valid UTF-8 at file offset " +
                     std::to_string(kLengthPrefixBytes + bad));
  }
  if (json.starts_with("\xef\xbb\xbf")) {  // nlohmann skips a BOM; the reference (serde) fails
    return data_loss("safetensors header starts with a byte order mark, which is not JSON");
  }
  SafetensorsHeader h;
  h.data_offset = kLengthPrefixBytes + n;
  h.file_size = file_size;
  HeaderSax sax(limits, &h);
  bool parsed = false;
  try {  // the SAX parser reports through `sax`; only allocation failure can throw here
    parsed = nlohmann::json::sax_parse(json.begin(), json.end(), &sax);
  } catch (const std::exception& e) {
    return internal_error(std::string("parsing the safetensors header: ") + e.what());
  }
  if (!parsed) {
    return sax.status.ok() ? data_loss("safetensors header is not valid JSON") : sax.status;
  }
  RETURN_IF_ERROR(validate_data_ranges(h));
  return h;
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

const SafetensorsTensorInfo* SafetensorsHeader::find(std::string_view name) const {
  const auto it = index_by_name.find(name);
  return it == index_by_name.end() ? nullptr : &tensors[it->second];
}

const TensorBytesView* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_by_name.find(name);
  return it == index_by_name.end() ? nullptr : &tensors[it->second];
}

}  // namespace weightcast
