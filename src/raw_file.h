// Whole-file reads and crash-safe whole-file replacement for the command line tools.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/status.h"

namespace weightcast {

// Reads all of `path`; refuses files larger than `max_bytes`. Errors name the file.
Result<std::vector<uint8_t>> read_whole_file(const std::string& path,
                                             uint64_t max_bytes = uint64_t{1} << 40);

// Replaces `path` with `bytes` so that a crash leaves either the old or the new contents:
// write a temporary file beside it, fsync it, rename it over `path`, fsync the directory.
Status replace_file_atomically(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace weightcast
