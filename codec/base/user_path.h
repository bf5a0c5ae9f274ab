// What a path a user typed stands for, checked without opening it (stat never blocks, while
// opening a FIFO does): the checks behind the command-line flags, the readers in file_io.h and
// UserFileWriter (transport/user_file_writer.h). Every error names the path and the reason:
//   "symlink loop at '<p>'"                      ELOOP, not "does not exist"
//   "'<p>' does not exist"                       ENOENT (also a dangling symlink)
//   "'<p>' is a FIFO, not a regular file"        and the same for a directory, a socket, a
//                                                character or block device
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>

#include "codec/base/status.h"

namespace weightcast {

// "FIFO", "directory", "socket", "character device", "block device", "symlink",
// "regular file", "special file".
const char* file_kind_name(mode_t mode);

// stat(2) of `path` (following symlinks): nullopt when nothing is there (ENOENT, ENOTDIR);
// an error for a symlink loop or any other failure, naming the path.
Result<std::optional<struct stat>> stat_user_path(const std::string& path);

// The path names an existing regular file (after symlinks). kNotFound when missing,
// kInvalidArgument for a loop or another kind of file.
Status check_regular_file(const std::string& path);

// The path names an existing directory (after symlinks).
Status check_directory(const std::string& path);

// The path names something that exists (after symlinks); a loop is an error.
Status check_existing_path(const std::string& path);

// Refuses a file that is not a regular file, for messages of the readers and the writer.
Status refuse_non_regular(const std::string& path, const struct stat& st);

// An absolute path with symlinks resolved: realpath(3) of `path` when it exists, otherwise
// realpath of its directory joined with its file name (the directory must exist). A dangling
// symlink is refused rather than guessed through.
Result<std::string> resolve_user_path(const std::string& path);

}  // namespace weightcast
