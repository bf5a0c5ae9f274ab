// The figures the demo writes with --json-out (bench/run_group_bench.sh and `weightcast bench
// group` read them), built from the coordinator's status (proto SubscriberResult and
// VersionStatus carry what the subscribers' acks and the publisher's offers reported).
//
// Schema of the file (all byte counts are bytes; a figure a rank did not report is 0):
//   parameters, subscribers, density, config (the group.yaml path), journal_root,
//   median_delta_ms, median_anchor_ms, acks_by_transport {transport: count},
//   baseline_write_ms, baseline_read_ms, baseline_bytes (only with the baseline),
//   versions: [{version, anchor, stored_bytes, publish_to_commit_ms,
//               publisher_peak_rss_bytes, publisher_model_bytes,
//               results: [{rank, result, transport, apply_ms, bytes_read, bytes_written,
//                          peak_rss_bytes, engine_bytes}]}]   (committed versions, ascending)
//   ranks: [{rank, role, state, pid, host, vm_hwm_bytes}]
//   publisher_mode ("snapshot" or "hooked"),
//   publisher_steps: [{version, mode, anchor, written_bytes, write_ms, plain_copy_ms,
//                      publish_ms, stored_bytes, trainer_bytes}]   (the demo trainer's own
//                      figures, src/daemon/demo_trainer.h; empty without --json-out)
// vm_hwm_bytes is the rank process's peak RSS as the kernel reports it (VmHWM of
// /proc/<pid>/status), read by the demo just before it stops the ranks; 0 for a rank on
// another host or one that already exited (the publisher exits after its last commit).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "weightcast/control.pb.h"

namespace weightcast::demo {

// VmHWM of process `pid` in bytes; 0 when it cannot be read (gone, not ours to read).
uint64_t process_vm_hwm_bytes(uint32_t pid);

// The lines of the publisher's demo.figures_path file, as an array (empty when there is none).
nlohmann::json publisher_steps_json(const std::string& path);

// One entry per member of `status`, with vm_hwm_bytes read now for members on this host.
nlohmann::json ranks_json(const proto::StatusReply& status);

// The "versions" array: every version of `committed` (as first seen committed), each with
// its results as they stand in `latest` (the last status read; acks arriving after the commit
// are there) or, for a version `latest` no longer lists, as they were at the commit.
nlohmann::json versions_json(const std::map<uint64_t, proto::VersionStatus>& committed,
                             const proto::StatusReply& latest);

}  // namespace weightcast::demo
