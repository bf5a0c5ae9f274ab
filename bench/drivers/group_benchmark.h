// `weightcast bench group`: the rank-group figures of docs/PERFORMANCE.md ("Rank group bench")
// in one command. It runs the group demo (examples/group_demo.cc, started through
// deploy/local/weightcast-local) once per transport with --no-faults, reads each run's
// --json-out, measures the in-process codec reference of the same versions
// (bench/drivers/group_codec_reference.h) after the runs (so that it does not compete with the
// ranks for the cores), and puts every run's figures next to its targets
// (bench/drivers/group_bench_targets.h).
//
// Publisher modes (--publisher-mode, src/daemon/demo_trainer.h): every transport runs once per
// mode, "snapshot" first; a "hooked" run is compared with the snapshot run of its transport
// (bench/drivers/group_bench_hooked.h), which is added when the modes do not list it, as are an
// "fp8" run (group_bench_fp8.h) and a "ranks" run (publisher_ranks publisher ranks, each
// publishing a shard: group_bench_ranks.h). A run's label is its transport, with "-hooked",
// "-fp8" or "-ranks" after it.
//
// Transports: "fs" (subscribers read the journal), "ucx" (live over UCX, the publisher serving
// its own memory in place) and "ucx-copy" (from a shared-memory copy), as
// bench/run_group_bench.sh. Each run's files go to <work_dir>/<label>/ (the demo's work
// directory, emptied of a previous run's journal), <work_dir>/<label>.json and .log.
//
// The result: {parameters, density, versions, subscribers, seed, publisher_modes,
// bounds {rss_fixed_bytes, rss_delta_factor, written_factor, latency_factor,
// publisher_snapshot_factor, write_copy_factor, publish_factor, slack}, codec (null without the
// reference, else {parameters, tensors, threads, versions: [{version, changed_elements,
// changed_tensors, record_bytes, encode_ms, apply_ms}]}), runs: [{label, transport, publisher_mode,
// journal_root, demo_json, log, ...the summary of summarize_group_run, and for a hooked run
// modes}]}. Fails when a run fails (naming its log) or the reference fails; targets never fail it
// (the caller decides, `--check`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/drivers/group_bench_targets.h"
#include "codec/base/status.h"

namespace weightcast {

struct GroupBenchConfig {
  uint64_t parameters = uint64_t{1} << 28;
  double density = 0.01;
  uint64_t versions = 10;  // after the initial one (the demo's --versions)
  uint32_t subscribers = 1;
  uint32_t tensor_parallel = 1;    // above 1: the subscribers are ranks of tensor-parallel engines
  uint32_t whole_subscribers = 0;  // with tensor_parallel: the last ones hold whole tensors
  uint32_t publisher_ranks = 4;    // publisher mode "ranks": publisher ranks, each a shard
  std::vector<std::string> transports = {"fs"};
  std::vector<std::string> publisher_modes = {"snapshot"};  // "snapshot", "hooked", "fp8", "ranks"
  std::string work_dir = "/tmp/weightcast-bench-group";
  std::string demo;           // the weightcast_group_demo executable
  size_t threads = 0;         // the codec reference's (0: all cores, as weightcastd)
  uint32_t timeout_s = 1800;  // per run
  bool codec_reference = true;
  GroupBenchBounds bounds;
  std::function<void(const std::string&)> log;  // progress lines; none when empty
};

Result<nlohmann::json> run_group_benchmark(const GroupBenchConfig& config);

}  // namespace weightcast
