// `weightcast journal repair-head`: rebuilds a lost or unreadable HEAD from the steps on disk.
//
// A journal whose HEAD is gone is refused by every writer and reader (read_journal_head in
// transport/fs/step_commit.h), because starting over would reuse committed version numbers.
// This is the way back: take the writer lock, try the steps newest first, and make HEAD name
// the newest one that replays completely (its anchor's extents, every delta part's XXH3,
// every tensor checksum), keeping the journal identity its manifest carries. Nothing but
// HEAD is written; steps newer than the one chosen are listed as unverifiable and left in
// place (the next writer removes them as uncommitted).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

struct RepairHeadReport {
  uint64_t version = 0;
  uint64_t anchor_version = 0;
  std::string journal_id;
  std::vector<std::string> rejected;  // newer steps that did not verify, with the reason
};

// kFailedPrecondition when HEAD is readable (nothing to repair), when there is no step, or
// when another writer holds the journal; kDataLoss naming every step tried when none replays.
Result<RepairHeadReport> journal_repair_head(const std::string& root, size_t threads,
                                             const std::function<void(const std::string&)>& log);

}  // namespace weightcast
