// The one way a command writes a file a user named (delta encode -o, delta apply --target,
// journal materialize --out, adapter publish's files, group init's config). The journal's own
// files (HEAD, MANIFEST, parts) keep their protocol in transport/fs and do not come here.
//
// Before any byte is written, create() refuses, naming the paths:
//   - an output that is one of the command's inputs: same st_dev+st_ino once both exist
//     (a symlink or hard link to an input counts), the same resolved path otherwise
//     ("output '<o>' is the input '<i>'");
//   - an output inside a journal root (transport/fs/journal_root.h), whose files
//     only the journal writer may touch ("output '<o>' lies inside the journal '<root>'");
//   - an existing output that is not a regular file: a FIFO would block the writer, a
//     directory or device cannot be replaced ("'<o>' is a FIFO, not a regular file");
//   - an existing output nobody may write (no write bit) or this process may not write
//     ("'<o>' is read-only"); the mode is never changed to force a write.
// A symlink is followed: the file it resolves to is written, the link stays a link.
//
// Two ways of writing an existing file, chosen per command (docs/DECISIONS.md):
//   kInPlace        the file itself is written (pwrite from offset 0, ftruncate to the new
//                   length, fsync): its inode stays, so hard links see the new content and
//                   mode, owner, ACLs and xattrs are untouched. A crash or a write error in
//                   the middle leaves the file torn (part old, part new bytes). That is the
//                   choice for a user's own working file (delta apply): its identity matters
//                   more than atomicity there, and the command verifies the new content in
//                   memory before the first write, so only a crash or a full disk can tear
//                   it. The alternative, kAtomicReplace, would give the path a new inode
//                   and silently detach every hard link.
//   kAtomicReplace  a temp file in the directory of the resolved target, fsync, rename over
//                   the resolved target, directory fsync: readers see the old file or the
//                   new one, never a mix. The new file takes the old one's mode (and owner
//                   and group when running as root); other hard links keep the old content.
// A target that does not exist yet is always created through a temp file and rename, so a
// half-written output never appears under its name (mode 0666 less the umask).
//
// Temp files are named `.<name>.wctmp.<pid>.<n>` beside the target. An uncommitted writer
// removes its temp file when destroyed; a process killed before that (SIGKILL, power loss)
// leaves one, which the next create() for the same target removes once kill(pid, 0) says the
// process is gone (ESRCH). The earlier writer's `.<name>.tmp.<pid>` names are cleaned the same
// way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

enum class UserWriteMode { kInPlace, kAtomicReplace };

struct UserFileOptions {
  UserWriteMode mode = UserWriteMode::kAtomicReplace;
  // Files the command reads: the output must not be any of them.
  std::vector<std::string> inputs;
  // Journal roots the command reads: the output must not lie inside one (checked on top of
  // the layout detection, which finds any journal that has been written to).
  std::vector<std::string> journals{};
};

// create()'s refusals alone, creating nothing: for commands that check their output before
// long work (journal materialize rebuilds a model first).
Status check_user_output(const std::string& path, const UserFileOptions& options);

class UserFileWriter {
 public:
  static Result<UserFileWriter> create(const std::string& path, const UserFileOptions& options);
  UserFileWriter(UserFileWriter&& other) noexcept;
  UserFileWriter& operator=(UserFileWriter&&) = delete;
  UserFileWriter(const UserFileWriter&) = delete;
  ~UserFileWriter();

  // Appends bytes; errors name the path as the user gave it.
  Status write(std::span<const uint8_t> bytes);
  ByteSink sink();
  // Makes the written bytes the file's content, durably (see the modes above). Once only.
  Status commit();

  uint64_t bytes_written() const { return written_; }
  // The file written: the target after symlinks, absolute.
  const std::string& resolved_path() const { return resolved_; }

 private:
  UserFileWriter() = default;
  std::string path_, resolved_, temp_;
  int fd_ = -1;
  bool in_place_ = false;
  bool committed_ = false;
  uint64_t written_ = 0;
};

// UserFileWriter in one call.
Status write_user_file(const std::string& path, std::span<const uint8_t> bytes,
                       const UserFileOptions& options);

// Removes temp files of `target` (resolved) left by processes that no longer run; returns how
// many it removed. create() calls it; exposed for tests.
size_t remove_stale_user_temps(const std::string& resolved_target);

}  // namespace weightcast
