// Whole-file reads for the command line tools (writes: transport/file_io.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/status.h"
#include "transport/file_io.h"

namespace weightcast {

// Reads all of `path`; refuses files larger than `max_bytes`. Errors name the file.
Result<std::vector<uint8_t>> read_whole_file(const std::string& path,
                                             uint64_t max_bytes = uint64_t{1} << 40);

}  // namespace weightcast
