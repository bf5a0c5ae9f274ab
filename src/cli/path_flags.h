// Checks of path flags, shared by weightcast and weightcastd, instead of CLI11's ExistingFile,
// ExistingDirectory and ExistingPath: CLI11 reports a symlink loop as "File does not exist" and
// accepts a FIFO as a file (the command then blocks opening it). These stat the path (which
// never blocks) and give codec/base/user_path.h's reasons, e.g. "symlink loop at 'p'" or
// "'p' is a FIFO, not a regular file"; CLI11 prefixes the flag's name.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "codec/base/user_path.h"

namespace weightcast::cli {

inline CLI::Validator status_validator(Status (*check)(const std::string&), const char* name) {
  return CLI::Validator(
      [check](std::string& path) {
        const Status s = check(path);
        return s.ok() ? std::string() : s.message();
      },
      name);
}

// A regular file (after symlinks): configs, models, targets, deltas.
inline CLI::Validator existing_regular_file() {
  return status_validator(&check_regular_file, "FILE");
}

inline CLI::Validator existing_directory() {
  return status_validator(&check_directory, "DIR");
}

// A file or a directory (the command decides which it accepts).
inline CLI::Validator existing_path() {
  return status_validator(&check_existing_path, "PATH");
}

}  // namespace weightcast::cli
