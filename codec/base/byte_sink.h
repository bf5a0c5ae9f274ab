// Where serialised bytes go, in order: the writers of the formats and AtomicFileWriter
// (file_io.h) hand their output to one.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "codec/base/status.h"

namespace weightcast {

// Writers call it with consecutive pieces; an error stops the writer and is returned to its
// caller unchanged.
using ByteSink = std::function<Status(std::span<const uint8_t>)>;

}  // namespace weightcast
