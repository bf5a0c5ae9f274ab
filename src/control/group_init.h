// `weightcast group init`: a ready-to-run rank group on one machine or a shared directory: a
// CURVE key pair per rank and one for observers, and a group.yaml naming them (CURVE on by
// default), with a coordinator endpoint on a free loopback port unless one is given. The demo
// and the tests build their groups with it too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

struct GroupInitOptions {
  std::string dir;  // created if missing; keys/ and group.yaml go here
  std::string group_id = "local";
  uint32_t publishers = 1;   // ranks 1..publishers
  uint32_t subscribers = 2;  // the ranks after them; rank 0 is the coordinator
  std::string endpoint;      // default tcp://127.0.0.1:<free port>
  bool curve = true;
  uint64_t anchor_every = 10;
  uint32_t max_in_flight = 2;
  uint32_t heartbeat_ms = 200;
  uint32_t dead_after_ms = 3000;
  uint32_t ack_timeout_ms = 60000;
  uint32_t lease_ttl_ms = 60000;
  // In preference order; a rank that cannot use ucx (no UCX here) gets the next one.
  std::vector<std::string> transports = {"ucx", "fs"};
  std::string ucx_tls;  // the ucx.tls field when not empty (default: UCX chooses)
  // The ucx.publisher_memory field when not empty (default auto: docs/CONFIG.md).
  std::string ucx_publisher_memory;
  // A demo: section for publishers without a trainer (0 parameters: none).
  uint64_t demo_parameters = 0;
  double demo_density = 0.01;
  uint64_t demo_versions = 20;
  uint32_t demo_step_interval_ms = 0;  // demo.step_interval_ms when not 0 (a paced publisher)
  std::string demo_publisher_mode;     // demo.publisher_mode when not empty (snapshot, hooked)
  std::string demo_figures_path;       // demo.figures_path when not empty
  bool fp8 = false;                    // an `fp8: {}` section (an FP8 group, default selection)
  // When above 1: the subscribers are engine ranks of a tensor-parallel layout `tp<N>` with
  // vLLM's cuts of Hugging Face names (kTensorParallelRules), replica k of them ranks
  // N*k .. N*k + N - 1 among the subscribers, part = the rank's place in its replica.
  uint32_t tensor_parallel = 1;
  // With tensor_parallel above 1: how many of the subscribers (the last ones) are engines that
  // hold every tensor whole instead (a second layout beside tp<N>).
  uint32_t whole_subscribers = 0;
  bool overwrite = false;  // replace an existing group.yaml (existing key files are reused)
};

// How vLLM's tensor parallelism cuts Hugging Face tensor names (column-parallel projections
// and the vocabulary along their rows, row-parallel ones along their columns; norms and
// routers whole), as `layouts` rules: {regex, dimension}.
struct TensorParallelRule {
  const char* match;
  uint32_t dim;
};
inline constexpr TensorParallelRule kTensorParallelRules[] = {
    {R"(.*\.(q|k|v|gate|up)_proj\.(weight|bias))", 0},
    {R"(.*\.(o|down)_proj\.weight)", 1},
    {R"(.*(embed_tokens|lm_head)\.weight)", 0},
};

// Why `subscribers` cannot be the ranks of whole replicas of that tensor parallel size (empty
// when they can): what `group init`, the demo and `bench group` refuse.
std::string tensor_parallel_refusal(uint32_t subscribers, uint32_t tensor_parallel,
                                    uint32_t whole_subscribers = 0);

struct GroupInitResult {
  std::string config_path;
  std::string journal_root;
};

Result<GroupInitResult> init_group(const GroupInitOptions& options);

// A free TCP port on 127.0.0.1 (bound and released: another process may take it first).
Result<uint16_t> free_loopback_port();

}  // namespace weightcast
