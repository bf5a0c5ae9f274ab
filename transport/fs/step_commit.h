// The publication protocol of a journal root (docs/FORMATS.md, "Filesystem journal"): a step is
// written under .staging/, its files and directory fsynced, renamed into the root, the root
// fsynced, and only then HEAD replaced (atomically, the same way). A crash at any instant leaves
// HEAD naming the previous complete version or the new one; what a crashed writer left behind
// (staging directories, a renamed step HEAD never named) is removed when the next writer
// takes the root.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "codec/base/status.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// The one writer of a journal root: holds an exclusive flock on ROOT/LOCK for its lifetime
// (released by the kernel if the process dies, so a SIGKILLed writer never blocks the next).
class JournalLock {
 public:
  enum class Mode {
    kWrite,   // HEAD must be readable (or the journal new); leftovers are cleaned
    kRepair,  // HEAD may be missing or unreadable; nothing is cleaned or created
  };
  // Creates the root (and .staging/, leases/) when missing, takes the lock without waiting
  // (kFailedPrecondition naming the root and the holder's pid when another writer has it).
  // kWrite: a root without HEAD and without steps is a new journal: it gets an identity and
  // an empty HEAD; a root without HEAD but with steps is refused (read_journal_head); then
  // stale staging directories and uncommitted steps (newer than HEAD) are removed.
  static Result<JournalLock> acquire(const JournalLayout& layout, Mode mode = Mode::kWrite);
  JournalLock(JournalLock&& other) noexcept;
  JournalLock& operator=(JournalLock&&) = delete;
  JournalLock(const JournalLock&) = delete;
  ~JournalLock();

  // The HEAD found when the lock was taken (nullopt: an empty journal; kRepair: also a
  // missing or unreadable one).
  const std::optional<proto::JournalHead>& head_at_start() const { return head_; }
  // The journal's identity, written into every HEAD this writer commits. A journal from
  // before identities gets a new one here.
  const std::string& journal_id() const { return journal_id_; }
  // Directories removed as a crashed writer's leftovers.
  int cleaned() const { return cleaned_; }

 private:
  JournalLock() = default;
  int fd_ = -1;
  std::optional<proto::JournalHead> head_;
  std::string journal_id_;
  int cleaned_ = 0;
};

// HEAD of the root; nullopt when nothing is committed yet (an empty HEAD, or no HEAD and no
// step directory). A HEAD that exists but does not parse is an error naming it; so is a
// missing HEAD beside step directories (kDataLoss: the journal is not empty, and treating it
// as empty would reuse committed version numbers), naming `weightcast journal repair-head`.
Result<std::optional<proto::JournalHead>> read_journal_head(const JournalLayout& layout);

// A new random journal identity (32 hex digits).
std::string new_journal_id();

// A fresh, empty staging directory for `version` (replacing any leftover).
Result<std::string> create_staging_dir(const JournalLayout& layout, uint64_t version);

// Writes `dir`/MANIFEST (framed, fsynced; no rename: `dir` is being staged).
Status write_manifest_file(const std::string& dir, const proto::StepManifest& manifest);

// Writes `manifest` into the staged step (fsynced with the staged directory), then runs
// `before_rename` when given, whose error leaves the step staged and is returned (the caller
// removes it); then renames the step to its version's place, fsyncs the root and replaces HEAD
// with {version, anchor_version, journal_id} (the manifest's journal_id). A check that must
// pass before the version exists (the hooked publisher's guard) goes in `before_rename`, so
// that the manifest's write and fsync overlap it.
// `before_head` (tests) runs between the rename and HEAD, the window a crash test must hit.
Status commit_step(const JournalLayout& layout, const std::string& staged_dir,
                   const proto::StepManifest& manifest,
                   const std::function<void()>& before_head = {},
                   const std::function<Status()>& before_rename = {});

// Replaces HEAD atomically (temp file, fsync, rename, root fsync).
Status write_head(const JournalLayout& layout, const proto::JournalHead& head);

int64_t unix_now_ms();

}  // namespace weightcast
