// What a journal keeps (ARCHITECTURE.md §5, invariant 3): the newest `keep_anchors` anchors at or
// below HEAD and every step after the oldest of them, plus every step a live lease still needs.
// Leases are files under leases/: a reader replaying from version x holds one naming x until
// it is done or the lease expires; garbage collection removes expired leases.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

struct RetentionPolicy {
  size_t keep_anchors = 2;  // at least 1
};

struct GcReport {
  std::vector<uint64_t> removed;            // step versions removed
  std::vector<std::string> expired_leases;  // holders whose leases were removed
  uint64_t keep_from = 0;                   // every step >= this was kept
};

// Removes the steps nothing needs any more. Steps are hidden by a rename into .staging/
// before they are deleted, so a reader never sees half a step. A journal without HEAD is
// left alone. Uncommitted steps (newer than HEAD) are the writer's business, not GC's.
Result<GcReport> collect_garbage(const JournalLayout& layout, const RetentionPolicy& policy,
                                 int64_t now_unix_ms);

// Writes (or renews) the lease of `holder` (a safe file name) on `version` until
// now + ttl_ms. Atomic: a reader of leases/ sees the old lease or the new one.
Status write_lease(const JournalLayout& layout, const std::string& holder, uint64_t version,
                   int64_t now_unix_ms, int64_t ttl_ms);
Status release_lease(const JournalLayout& layout, const std::string& holder);

// The leases on record (expired ones included; unreadable lease files are skipped and named
// in `unreadable`).
Result<std::vector<proto::Lease>> list_leases(const JournalLayout& layout,
                                              std::vector<std::string>* unreadable = nullptr);

}  // namespace weightcast
