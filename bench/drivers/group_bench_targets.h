// The figures and targets of one rank-group run in `weightcast bench group`: what the demo's
// --json-out reported (examples/group_demo_report.h) next to the in-process codec reference
// of the same versions (bench/drivers/group_codec_reference.h), each target as measured / bound.
//
// Only steady versions count for the per-version targets ("counted"): every subscriber acked
// it "ok" (acked_by_all) and also acked the version before it. The demo's publisher does not
// wait for subscribers, so versions it publishes while they still load the first anchor commit
// with nobody to ack them; and the first version a subscriber acks is the one it joined or
// caught up at (an anchor load and a replay of deltas), not the cost of one step.
//
// Targets (docs/PERFORMANCE.md, "Rank group bench"), every bound multiplied by `slack`:
//   subscriber_rss      per subscriber: peak RSS - engine bytes
//                       <= rss_fixed_bytes + rss_delta_factor x the largest delta version's
//                       stored bytes;
//   bytes_written       per subscriber and delta version: bytes written into engine memory
//                       <= written_factor x changed elements x element size;
//   all_acked_vs_codec  the median over the delta versions of publish -> all-acked divided
//                       by the in-process encode + apply of that version <= latency_factor.
//   publisher_rss       the publisher's peak RSS - the trainer's own bytes (the demo model's
//                       6 bytes per parameter: fp32 master weights and the bf16 tensors it
//                       registers, plus a hooked trainer's one-tensor write scratch;
//                       src/daemon/demo_trainer.h) <= publisher_snapshot_factor x the model's
//                       bf16 bytes in snapshot mode (the publisher's one snapshot), and
//                       <= rss_fixed_bytes + rss_delta_factor x the largest delta in hooked
//                       mode (no snapshot).
// The targets comparing a hooked run with the snapshot run of the same transport are in
// bench/drivers/group_bench_hooked.h.
// A target that cannot be evaluated (the rank did not report the figure, or no codec
// reference was measured) has "pass": null and a "why". A 0 in the demo's figures means "not
// reported" (proto3 scalars), except that a subscriber's engine bytes fall back to the
// publisher's model bytes (a weightcastd subscriber registers every tensor of the journal)
// and its peak RSS to the VmHWM the demo read; the "*_source" fields say which was used. With
// several publisher ranks (the demo's "publishers" above 1) each publisher rank's peak RSS is its
// VmHWM (only the lead offers), its own bytes the lead's shard, and the trainer bytes the whole
// demo model every rank holds: the target then bounds what weightcast adds to one shard.
//
// Schema of the result:
//   largest_delta_bytes, median_delta_ratio (null without the reference),
//   publisher_mode ("snapshot" or "hooked"),
//   ranks: [{rank, role, peak_rss_bytes, peak_rss_source ("ack", "offer", "vm_hwm", "none"),
//            own_bytes, own_bytes_source ("ack", "offer", "publisher_model_bytes", "none"),
//            peak_rss_minus_engine_bytes (subscribers only),
//            trainer_bytes, peak_rss_minus_trainer_bytes (the publisher; null when the
//            trainer reported no figures)}],
//   versions: [{version, kind ("anchor", "delta"), acked_by_all, counted, stored_bytes,
//               publish_to_all_acked_ms, changed_elements, encode_ms, apply_ms,
//               encode_apply_ms, ratio (counted deltas, with the reference; else null),
//               publish_ms, write_ms, plain_copy_ms (the trainer's, null when not reported:
//               publish() or publish_step() -> published, and in hooked mode the write pass
//               and a plain copy of the same values),
//               subscribers: [{rank, result, transport, bytes_written, bytes_read}]}]
//               (bytes_written, bytes_read: null when not reported),
//   targets: [{target, rank (per-rank targets), version (bytes_written), measured, bound,
//              unit ("bytes" or "ratio"), pass (true, false or null), why (when null)}]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/drivers/group_codec_reference.h"

namespace weightcast {

struct GroupBenchBounds {
  uint64_t rss_fixed_bytes = uint64_t{64} << 20;
  double rss_delta_factor = 2;
  double written_factor = 2;
  double latency_factor = 1.5;
  double publisher_snapshot_factor = 1.05;  // x the model's bf16 bytes
  double write_copy_factor = 2;             // hooked write pass / plain copy
  double publish_factor = 0.25;             // hooked publish / snapshot publish
  double fp8_bytes_factor = 0.5;            // FP8 group's delta bytes / the bf16 group's
  double slack = 1;                         // multiplies every bound (`--bound-factor`)
};

// The median of `v` (0 when empty), and one target's JSON: {target, measured, bound, unit,
// pass} (pass null when nothing was measured). Shared by every bench target.
double bench_median(std::vector<double> v);
nlohmann::json bench_target(const char* name, nlohmann::json measured, double bound,
                            const char* unit);

// `demo` is one run's --json-out; `codec` the reference of the same versions, or null.
nlohmann::json summarize_group_run(const nlohmann::json& demo, const CodecReference* codec,
                                   const GroupBenchBounds& bounds);

// Whether every target of `runs` (summaries above) named in `names` passed; a target that
// could not be evaluated does not pass. `failed` collects "<target> <rank/version>: ..." lines.
bool targets_pass(const nlohmann::json& runs, const std::vector<std::string>& names,
                  std::vector<std::string>* failed);

}  // namespace weightcast
