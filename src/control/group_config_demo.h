// The `demo:` section of the group config (docs/CONFIG.md), read by parse_group_config.
#pragma once

#include <yaml-cpp/yaml.h>

#include "codec/base/status.h"
#include "src/control/yaml_field_reader.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

// Fills cfg.demo() from the section, its defaults for the fields it leaves out; leaves
// cfg.demo() unset when the section is absent.
Status parse_demo_section(const YamlFieldReader& r, const YAML::Node& n, proto::GroupConfig& cfg);

}  // namespace weightcast
