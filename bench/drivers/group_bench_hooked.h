// The targets of `weightcast bench group --publisher-mode hooked` that compare a hooked run
// with the snapshot run of the same transport and seed (docs/PERFORMANCE.md, "Rank group
// bench"; the modes: src/endpoint/publish_step.h, the demo trainer: src/daemon/demo_trainer.h).
// Both runs publish the same versions, so version v of one is version v of the other.
//
// Targets, each bound multiplied by `slack`, appended to the hooked run's "targets":
//   hooked_write_vs_copy        the median over the hooked run's delta versions of the write
//                               pass (every PublishStep::write of the version) divided by a
//                               plain copy of the same new values into the same live tensors,
//                               timed in the same run <= write_copy_factor;
//   hooked_publish_vs_snapshot  the median over the versions both runs published as deltas of
//                               the hooked publish_step -> published divided by the snapshot
//                               run's publish -> published of that version <= publish_factor;
//   hooked_records_identical    the delta versions whose part files (every file of the step
//                               but its MANIFEST, which holds times and the writer) differ
//                               byte for byte between the two journals <= 0, over the delta
//                               versions both journals still hold (retention removes steps
//                               before the last anchors); n/a when there is none.
// The hooked run also gets "modes": {compared_with (the snapshot run's label),
// write_vs_copy_median, publish_vs_snapshot_median, compared_versions, differing_versions}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/drivers/group_bench_targets.h"

namespace weightcast {

// `snapshot` and `hooked` are summaries (summarize_group_run) with "journal_root" and "label".
void compare_publisher_modes(const nlohmann::json& snapshot, nlohmann::json* hooked,
                             const GroupBenchBounds& bounds);

// 1 when the step of `version` holds the same files (but MANIFEST) with the same bytes in
// both journals, 0 when not, -1 when either journal no longer holds the step.
int same_delta_step(const std::string& journal_a, const std::string& journal_b, uint64_t version);

}  // namespace weightcast
