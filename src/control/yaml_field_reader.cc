#include "src/control/yaml_field_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>
#include <utility>

namespace weightcast {
namespace yaml_field {

std::string child(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string indexed(const std::string& parent, size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

std::string quote(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + (s.size() > 64 ? "...'" : "'");
}

std::string describe(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a sequence";
  if (!n.IsScalar()) return "nothing (null)";
  return quote(n.Scalar());
}

}  // namespace yaml_field

using yaml_field::child;
using yaml_field::describe;

YamlFieldReader::YamlFieldReader(std::string_view source, std::string_view base_dir,
                                 YamlReaderLimits limits)
    : source_(source), base_dir_(base_dir), limits_(std::move(limits)) {}

Status YamlFieldReader::fail(const std::string& field, const std::string& what) const {
  return invalid_argument(source_ + ": " + field + ": " + what);
}

Status YamlFieldReader::over_limit(const std::string& field, const char* limit, uint64_t value,
                                   uint64_t got, const char* unit) const {
  return out_of_range(source_ + ": " + field + ": " + std::to_string(got) + " " + unit +
                      " exceed " + limits_.limits_name + "::" + limit + " (" +
                      std::to_string(value) + ")");
}

Status YamlFieldReader::missing(const std::string& parent, const char* key) const {
  return fail(child(parent, key), "required field is missing");
}

Status YamlFieldReader::mapping(const YAML::Node& n, const std::string& field,
                                std::initializer_list<std::string_view> allowed) const {
  const std::string where = field.empty() ? std::string("top level") : field;
  if (!n.IsMap()) return fail(where, "expected a mapping, got " + describe(n));
  std::set<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return fail(where, "keys must be plain names");
    const std::string& key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string names;
      for (std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      return fail(where, "unknown key " + describe(kv.first) + " (allowed: " + names + ")");
    }
    if (!seen.insert(key).second) return fail(child(field, key), "duplicate key");
  }
  return ok_status();
}

Status YamlFieldReader::sequence(const YAML::Node& n, const std::string& field, uint64_t max,
                                 const char* limit) const {
  if (!n.IsSequence()) return fail(field, "expected a sequence, got " + describe(n));
  if (n.size() > max) return over_limit(field, limit, max, n.size(), "entries");
  return ok_status();
}

Result<std::string> YamlFieldReader::str(const YAML::Node& n, const std::string& field) const {
  if (!n.IsScalar()) return fail(field, "expected a string, got " + describe(n));
  const std::string& s = n.Scalar();
  if (s.size() > limits_.max_string_bytes) {
    return over_limit(field, "max_string_bytes", limits_.max_string_bytes, s.size(), "bytes");
  }
  if (s.empty()) return fail(field, "must not be empty");
  if (s.find('\0') != std::string::npos) return fail(field, "contains a NUL byte");
  return s;
}

Result<uint64_t> YamlFieldReader::uint(const YAML::Node& n, const std::string& field, uint64_t min,
                                       uint64_t max) const {
  if (!n.IsScalar()) return fail(field, "expected an integer, got " + describe(n));
  const std::string& s = n.Scalar();
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) || end != s.data() + s.size() ||
      ec == std::errc::invalid_argument) {
    return fail(field, "expected a non-negative integer, got " + describe(n));
  }
  if (ec == std::errc::result_out_of_range || v > max) {
    return fail(field, describe(n) + " is too large (at most " + std::to_string(max) + ")");
  }
  if (v < min) {
    return fail(field, describe(n) + " is too small (at least " + std::to_string(min) + ")");
  }
  return v;
}

Result<double> YamlFieldReader::real(const YAML::Node& n, const std::string& field) const {
  if (!n.IsScalar()) return fail(field, "expected a number, got " + describe(n));
  const std::string& s = n.Scalar();
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) {
    return fail(field, "expected a finite number, got " + describe(n));
  }
  return v;
}

Result<bool> YamlFieldReader::boolean(const YAML::Node& n, const std::string& field) const {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    return fail(field, "expected true or false, got " + describe(n));
  }
  return v;
}

Result<std::string> YamlFieldReader::str_field(const YAML::Node& m, const std::string& parent,
                                               const char* key,
                                               std::optional<std::string> fallback) const {
  const YAML::Node n = m[key];
  if (!n.IsDefined()) return fallback ? Result<std::string>(*fallback) : missing(parent, key);
  return str(n, child(parent, key));
}

Result<uint64_t> YamlFieldReader::uint_field(const YAML::Node& m, const std::string& parent,
                                             const char* key, std::optional<uint64_t> fallback,
                                             uint64_t min, uint64_t max) const {
  const YAML::Node n = m[key];
  if (!n.IsDefined()) return fallback ? Result<uint64_t>(*fallback) : missing(parent, key);
  return uint(n, child(parent, key), min, max);
}

Result<std::string> YamlFieldReader::path_field(const YAML::Node& m, const std::string& parent,
                                                const char* key) const {
  ASSIGN_OR_RETURN(std::string p, str_field(m, parent, key));
  return resolve(p);
}

std::string YamlFieldReader::resolve(const std::string& p) const {
  if (base_dir_.empty() || std::filesystem::path(p).is_absolute()) return p;
  return (std::filesystem::path(base_dir_) / p).lexically_normal().string();
}

}  // namespace weightcast
