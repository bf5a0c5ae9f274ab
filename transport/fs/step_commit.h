// The publication protocol of a journal root (DESIGN §5, invariant 2): a step is written
// under .staging/, its files and directory fsynced, renamed into the root, the root fsynced,
// and only then HEAD replaced (atomically, the same way). A crash at any instant leaves HEAD
// naming the previous complete version or the new one; what a crashed writer left behind
// (staging directories, a renamed step HEAD never named) is removed when the next writer
// takes the root.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "codec/status.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// The one writer of a journal root: holds an exclusive flock on ROOT/LOCK for its lifetime
// (released by the kernel if the process dies, so a SIGKILLed writer never blocks the next).
class JournalLock {
 public:
  // Creates the root (and .staging/, leases/) when missing, takes the lock without waiting
  // (kFailedPrecondition naming the root and the holder's pid when another writer has it),
  // then removes stale staging directories and uncommitted steps (newer than HEAD).
  static Result<JournalLock> acquire(const JournalLayout& layout);
  JournalLock(JournalLock&& other) noexcept;
  JournalLock& operator=(JournalLock&&) = delete;
  JournalLock(const JournalLock&) = delete;
  ~JournalLock();

  // The HEAD found when the lock was taken (nullopt: an empty journal).
  const std::optional<proto::JournalHead>& head_at_start() const { return head_; }
  // Directories removed as a crashed writer's leftovers.
  int cleaned() const { return cleaned_; }

 private:
  JournalLock() = default;
  int fd_ = -1;
  std::optional<proto::JournalHead> head_;
  int cleaned_ = 0;
};

// HEAD of the root; nullopt when the journal has none yet (a missing HEAD file). A HEAD that
// exists but does not parse is an error naming it.
Result<std::optional<proto::JournalHead>> read_journal_head(const JournalLayout& layout);

// A fresh, empty staging directory for `version` (replacing any leftover).
Result<std::string> create_staging_dir(const JournalLayout& layout, uint64_t version);

// Writes `dir`/MANIFEST (framed, fsynced; no rename: `dir` is being staged).
Status write_manifest_file(const std::string& dir, const proto::StepManifest& manifest);

// Writes `manifest` into the staged step, fsyncs the staged directory, renames it to its
// version's place, fsyncs the root and replaces HEAD with {version, anchor_version}.
// `before_head` (tests) runs between the rename and HEAD, the window a crash test must hit.
Status commit_step(const JournalLayout& layout, const std::string& staged_dir,
                   const proto::StepManifest& manifest,
                   const std::function<void()>& before_head = {});

int64_t unix_now_ms();

}  // namespace weightcast
