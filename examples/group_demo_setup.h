// The demo's rank group on one machine: a work directory with CURVE keys for every rank and
// a group config (coordinator, one publisher of a synthetic MoE model, subscribers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast::demo {

struct DemoArgs {
  std::string work_dir;
  uint64_t parameters = uint64_t{1} << 28;
  double density = 0.01;
  uint64_t versions = 20;
  uint64_t anchor_every = 5;
  uint32_t subscribers = 2;  // started with the group
  // Above 1: publisher ranks that each publish an even shard of the model
  // (src/daemon/shard_demo.h).
  uint32_t publishers = 1;
  bool late_joiner = true;  // one more subscriber started at join_at
  uint64_t join_at = 12;
  bool kill_restart = true;  // SIGKILL one subscriber at kill_at, then restart it
  uint64_t kill_at = 7;
  // The publisher's pause between versions (demo.step_interval_ms), so that the kill and the
  // late join land mid-run on a small, fast model; 0: as fast as it can.
  uint32_t step_interval_ms = 0;
  uint32_t threads = 0;
  uint16_t port = 0;     // 0: ipc://<work_dir>/coordinator.sock (all ranks on this host)
  std::string bin_dir;   // weightcastd and weightcast
  std::string launcher;  // deploy/local/weightcast-local
  std::string json_out;  // per-version figures, for bench/
  bool baseline = true;  // time a full safetensors write + read of the model
  // Live subscribers read deltas over UCX when the build and host have it, else the journal.
  std::vector<std::string> transports = {"ucx", "fs"};
  std::string ucx_tls;               // empty: UCX chooses (shared memory on one machine)
  std::string ucx_publisher_memory;  // empty: auto (copies on a host without RDMA)
  // The demo trainer's publisher mode: "snapshot" or "hooked" (src/daemon/demo_trainer.h).
  std::string publisher_mode = "snapshot";
  bool fp8 = false;  // an FP8 group (the config's fp8 section, default selection)
  // Above 1: the subscribers are the ranks of tensor-parallel engines of this size, each
  // holding only its slices (GroupInitOptions::tensor_parallel).
  uint32_t tensor_parallel = 1;
  // With tensor_parallel above 1: subscribers that hold every tensor whole (the last ones).
  uint32_t whole_subscribers = 0;
  // Where the publisher rank appends its per-version trainer figures (demo.figures_path);
  // empty: none, and the trainer overlaps each step with the previous publication.
  std::string figures_path;
};

struct DemoGroup {
  std::string config_path;
  std::string journal_root;
  std::string state_dir;  // the launcher's
  uint32_t coordinator = 0;
  uint32_t publisher = 1;         // the first (the lead, when there are several)
  uint32_t publishers = 1;        // ranks publisher ..= publisher + publishers - 1
  uint32_t first_subscriber = 2;  // subscribers are first_subscriber, +1, ...; the late one last
  uint32_t subscriber_ranks = 0;  // including the late joiner
};

// Creates (emptying a previous demo's journal) the work directory, keys and group.yaml
// (src/control/group_init.h: ranks 0 coordinator, 1.. publishers, then subscribers).
Result<DemoGroup> prepare_demo_group(const DemoArgs& args);

}  // namespace weightcast::demo
