// Typed, range-checked reads of YAML (yaml-cpp) nodes, with every error naming the source and
// the field path ("ranks[2].role") and quoting the offending value.
//
// Contract: scalars are parsed here rather than with Node::as<T>() so that "-1", "1e3", "0x10"
// or "1.5" for an integer field are errors naming the field, never a silent wrap-around or
// truncation. yaml-cpp may still throw YAML::Exception from node access; callers run every
// read under one try block that turns it into a Status (group_config.cc does).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "codec/base/status.h"

namespace weightcast {
namespace yaml_field {

// "parent.key", or "key" at the top level.
std::string child(const std::string& parent, std::string_view key);
// "parent[i]".
std::string indexed(const std::string& parent, size_t i);
// A value from the file as it appears in an error: quoted, at most 64 bytes shown, bytes
// outside printable ASCII escaped as \xNN.
std::string quote(std::string_view s);
// How a node appears in an error: a scalar quoted, otherwise its kind ("a mapping").
std::string describe(const YAML::Node& n);

}  // namespace yaml_field

// Bounds the reader enforces on its own; `limits_name` names the caller's limits struct in
// over-limit errors ("... exceed GroupConfigLimits::max_string_bytes (4096)").
struct YamlReaderLimits {
  std::string limits_name;
  uint64_t max_string_bytes = 4096;
};

class YamlFieldReader {
 public:
  // `source` prefixes every error; `base_dir` resolves relative paths (empty: left as written).
  YamlFieldReader(std::string_view source, std::string_view base_dir, YamlReaderLimits limits);

  // kInvalidArgument "source: field: what".
  Status fail(const std::string& field, const std::string& what) const;
  // kOutOfRange "source: field: <got> <unit> exceed <limits_name>::<limit> (<value>)".
  Status over_limit(const std::string& field, const char* limit, uint64_t value, uint64_t got,
                    const char* unit) const;
  // "source: parent.key: required field is missing".
  Status missing(const std::string& parent, const char* key) const;

  // `n` is a mapping whose keys are unique scalars among `allowed` (field "" is the top level).
  Status mapping(const YAML::Node& n, const std::string& field,
                 std::initializer_list<std::string_view> allowed) const;
  // `n` is a sequence of at most `max` entries (`limit` names the bound).
  Status sequence(const YAML::Node& n, const std::string& field, uint64_t max,
                  const char* limit) const;

  // A non-empty scalar without NUL bytes, at most max_string_bytes long.
  Result<std::string> str(const YAML::Node& n, const std::string& field) const;
  // A decimal integer in [min, max] (no sign, exponent, base prefix or fraction).
  Result<uint64_t> uint(const YAML::Node& n, const std::string& field, uint64_t min,
                        uint64_t max) const;
  // A finite number.
  Result<double> real(const YAML::Node& n, const std::string& field) const;
  // A YAML boolean (true/false, yes/no, on/off).
  Result<bool> boolean(const YAML::Node& n, const std::string& field) const;

  // The entry `key` of mapping `m`: read when present, else the fallback, else (without one)
  // a missing-field error.
  Result<std::string> str_field(const YAML::Node& m, const std::string& parent, const char* key,
                                std::optional<std::string> fallback = std::nullopt) const;
  Result<uint64_t> uint_field(const YAML::Node& m, const std::string& parent, const char* key,
                              std::optional<uint64_t> fallback, uint64_t min, uint64_t max) const;
  // A required string entry read as a path and resolved against base_dir.
  Result<std::string> path_field(const YAML::Node& m, const std::string& parent,
                                 const char* key) const;

  // `p` as written when absolute or base_dir is empty, else base_dir/p lexically normalized.
  std::string resolve(const std::string& p) const;

 private:
  std::string source_;
  std::string base_dir_;
  YamlReaderLimits limits_;
};

}  // namespace weightcast
