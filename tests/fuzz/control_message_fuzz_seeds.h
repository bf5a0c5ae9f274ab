// Valid control message frames (src/control/messages.h) for the control message fuzz target:
// one serialized Envelope of every body kind, each within kControlFuzzLimits.
#pragma once

#include <cstdint>
#include <vector>

#include "src/control/messages.h"

namespace weightcast::fuzzing {

// The small limits the fuzz target decodes under, so mutations reach every limit check.
inline const MessageLimits kControlFuzzLimits = {
    .max_bytes = 4096,
    .max_checksums = 8,
    .max_members = 4,
    .max_string_bytes = 64,
    .max_transports = 4,
};

std::vector<std::vector<uint8_t>> make_control_message_seeds();

}  // namespace weightcast::fuzzing
