// The `nccl:` section of the group config (docs/CONFIG.md), read by parse_group_config.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>

#include "codec/base/status.h"
#include "src/control/yaml_field_reader.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

constexpr uint64_t kDefaultNcclBucketBytes = uint64_t{1} << 30;
constexpr uint32_t kDefaultNcclBuffers = 2;
constexpr uint32_t kDefaultNcclTimeoutMs = 60000;
constexpr uint64_t kMaxNcclBucketBytes = uint64_t{64} << 30;
constexpr uint32_t kMaxNcclBuffers = 8;
constexpr uint32_t kMaxNcclEnvEntries = 64;

// Fills cfg.nccl() with the section's values or the defaults (also when the section is
// absent). `env` takes NCCL_* names only, with values of printable ASCII.
Status parse_nccl_section(const YamlFieldReader& r, const YAML::Node& n, proto::GroupConfig& cfg);

}  // namespace weightcast
