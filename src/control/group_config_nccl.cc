#include "src/control/group_config_nccl.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace weightcast {
namespace {

bool valid_env_name(const std::string& name) {
  return name.size() > 5 && name.starts_with("NCCL_") &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isupper(static_cast<unsigned char>(c)) ||
                  std::isdigit(static_cast<unsigned char>(c)) || c == '_';
         });
}

bool printable(const std::string& v) {
  return std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
}

}  // namespace

Status parse_nccl_section(const YamlFieldReader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  const YAML::Node m = n.IsDefined() ? n : YAML::Node(YAML::NodeType::Map);
  RETURN_IF_ERROR(r.mapping(m, "nccl", {"bucket_bytes", "buffers", "timeout_ms", "env"}));
  const std::string s = "nccl";
  ASSIGN_OR_RETURN(uint64_t bucket, r.uint_field(m, s, "bucket_bytes", kDefaultNcclBucketBytes,
                                                 4096, kMaxNcclBucketBytes));
  ASSIGN_OR_RETURN(uint64_t buffers,
                   r.uint_field(m, s, "buffers", kDefaultNcclBuffers, 1, kMaxNcclBuffers));
  ASSIGN_OR_RETURN(uint64_t timeout,
                   r.uint_field(m, s, "timeout_ms", kDefaultNcclTimeoutMs, 1, 3600000));
  auto* out = cfg.mutable_nccl();
  out->set_bucket_bytes(bucket);
  out->set_buffers(static_cast<uint32_t>(buffers));
  out->set_timeout_ms(static_cast<uint32_t>(timeout));
  const YAML::Node env = m["env"];
  if (!env.IsDefined()) return ok_status();
  if (!env.IsMap()) return r.fail("nccl.env", "must be a mapping of NCCL_* names to values");
  if (env.size() > kMaxNcclEnvEntries) {
    return r.over_limit("nccl.env", "kMaxNcclEnvEntries", kMaxNcclEnvEntries, env.size(),
                        "entries");
  }
  for (const auto& kv : env) {
    ASSIGN_OR_RETURN(std::string name, r.str(kv.first, "nccl.env"));
    const std::string field = yaml_field::child("nccl.env", name);
    if (!valid_env_name(name)) {
      return r.fail(field, yaml_field::quote(name) +
                               " is not an NCCL variable (NCCL_ followed by capitals, digits, _)");
    }
    if (out->env().contains(name)) return r.fail(field, "appears twice");
    ASSIGN_OR_RETURN(std::string value, r.str(kv.second, field));
    if (!printable(value)) return r.fail(field, "value must be printable ASCII");
    (*out->mutable_env())[name] = value;
  }
  return ok_status();
}

}  // namespace weightcast
