// Whether a directory lies inside a journal: UserFileWriter (transport/user_file_writer.h)
// refuses to write a user's output among a journal's files.
#pragma once

#include <optional>
#include <string>

namespace weightcast {

// The journal root `dir` lies in: `dir` itself or its nearest ancestor that holds a journal
// (a JOURNAL marker, the writer's LOCK, a .staging directory, or HEAD beside a step
// directory v<20 digits>, transport/fs/journal_layout.h). nullopt when none; `dir` must be
// absolute and resolved.
std::optional<std::string> enclosing_journal_root(const std::string& dir);

}  // namespace weightcast
