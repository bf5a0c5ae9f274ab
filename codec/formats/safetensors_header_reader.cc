// The safetensors header reader: the JSON header, checked byte by byte (UTF-8, NUL, BOM) and
// then parsed in one SAX pass that catches duplicate keys and validates every entry, into a
// SafetensorsHeader whose data ranges are then checked against the file.
#include "codec/formats/safetensors_format.h"

#include <exception>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/formats/safetensors_header_reader.h"

namespace weightcast {

using safetensors_internal::find_invalid_utf8;
using safetensors_internal::kLengthPrefixBytes;
using safetensors_internal::kMetadataKey;
using safetensors_internal::printable;
using safetensors_internal::quote_name;
using safetensors_internal::reference_dtype_rank;
using safetensors_internal::validate_data_ranges;

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
  // nlohmann reports only literals with a minus sign here, "-0" included; serde_json reads
  // "-0" as a float, so the reference rejects it where a count belongs, and so do we.
  bool number_integer(int64_t v) {
    const std::string text = v == 0 ? "-0" : std::to_string(v);
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
                          std::to_string(kLengthPrefixBytes + position) +
                          "): " + printable(e.what())));
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

}  // namespace

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
  const std::string_view json(
      reinterpret_cast<const char*>(file_prefix.data()) + kLengthPrefixBytes, n);
  if (const size_t bad = find_invalid_utf8(json); bad != std::string_view::npos) {
    return data_loss("safetensors header is not valid UTF-8 at file offset " +
                     std::to_string(kLengthPrefixBytes + bad));
  }
  // nlohmann ends its input at a NUL byte, so "{}\0anything" would pass; JSON has no raw NUL.
  if (const size_t nul = json.find('\0'); nul != std::string_view::npos) {
    return data_loss("safetensors header has a NUL byte at file offset " +
                     std::to_string(kLengthPrefixBytes + nul) + ", which JSON does not allow");
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

const SafetensorsTensorInfo* SafetensorsHeader::find(std::string_view name) const {
  const auto it = index_by_name.find(name);
  return it == index_by_name.end() ? nullptr : &tensors[it->second];
}

}  // namespace weightcast
