// Valid group configs (src/control/group_config.h) for the group config fuzz target: a minimal
// one relying on every default, one with every section (CURVE and demo included), flow and
// block YAML styles, an ipc endpoint, anchors and aliases.
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_group_config_seeds();

}  // namespace weightcast::fuzzing
