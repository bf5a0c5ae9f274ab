// What the lead publisher rank (rank 0, the journal's writer) decided a version is, as the
// other ranks learn it: the lead alone knows whether the previous version was committed, so it
// alone decides whether a version is a delta or an anchor (docs/DECISIONS.md "Several publisher
// ranks"), and announces it in the version's fragments directory:
//
//   .staging/<step>.ranks/READY         an anchor, its shard files staged (rank_anchor.h)
//   .staging/<step>.ranks/DELTA         a delta on version - 1
//   .staging/<step>.ranks/rank-<r>.refused   rank r cannot write its part (the reason, text)
//
// A rank that cannot follow the plan (it holds no snapshot of version - 1: it restarted, or its
// last part was never committed) puts a refusal instead of its fragment, so the lead gives up
// on the version at once, naming the rank and its reason, rather than at its deadline; the
// lead's next version is then an anchor.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "codec/base/status.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {

enum class RankVersionKind { kAnchor, kDelta };

// The lead: announces that `version` is a delta on version - 1 (written atomically).
Status put_rank_delta_plan(const JournalLayout& layout, uint64_t version);

// Any other rank: waits up to `wait` for the lead's announcement of `version`
// (kDeadlineExceeded naming the lead and the journal).
Result<RankVersionKind> wait_for_rank_plan(const JournalLayout& layout, uint64_t version,
                                           uint32_t rank, std::chrono::milliseconds wait);

// Rank `rank` cannot write its part of `version`: `why` is put where the lead looks for its
// fragment (at most 4 KiB of it is kept).
Status put_rank_refusal(const JournalLayout& layout, uint64_t version, uint32_t rank,
                        const std::string& why);

// The newest version the lead has announced and not yet committed or given up on, if any: where
// a rank that restarts joins the others (its first version is then a delta it refuses, or an
// anchor it writes).
std::optional<uint64_t> newest_rank_plan(const JournalLayout& layout);

// The reason rank `rank` put for refusing `version`, if it did.
std::optional<std::string> rank_refusal(const JournalLayout& layout, uint64_t version,
                                        uint32_t rank);

}  // namespace weightcast
