// Valid NCCL round framing (transport/nccl/broadcast_round.h) for the round fuzz target: a
// header followed by its descriptor, for no parts, an empty part and several named parts.
#pragma once

#include <cstdint>
#include <vector>

namespace weightcast::fuzzing {

std::vector<std::vector<uint8_t>> make_nccl_round_seeds();

}  // namespace weightcast::fuzzing
