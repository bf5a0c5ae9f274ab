// A rank group's configuration file (YAML) validated into proto::GroupConfig.
//
// Contract: parse_group_config either returns a config every rank can run with (defaults
// filled in, relative paths made absolute against the file's directory, every rank's role
// and endpoint checked) or an error naming the file, the field ("ranks[2].role") and what is
// wrong with it. Unknown keys are errors, so a typo never silently falls back to a default.
// docs/CONFIG.md documents every field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "codec/base/status.h"
#include "src/control/messages.h"  // role_name
#include "weightcast/group_config.pb.h"

namespace weightcast {

struct GroupConfigLimits {
  uint64_t max_file_bytes = 1 << 20;
  uint32_t max_ranks = 4096;
  uint32_t max_string_bytes = 4096;
  uint32_t max_list_entries = 4096;
};

// Defaults for what the file leaves out (also what docs/CONFIG.md lists).
inline constexpr uint32_t kDefaultHeartbeatMs = 500;
inline constexpr uint32_t kDefaultDeadAfterMs = 5000;
inline constexpr uint32_t kDefaultAckTimeoutMs = 60000;
inline constexpr uint32_t kDefaultLeaseTtlMs = 600000;
inline constexpr uint64_t kDefaultAnchorEvery = 10;
inline constexpr uint32_t kDefaultRetainAnchors = 2;
inline constexpr uint32_t kDefaultMaxInFlight = 2;

// Upper bounds of the numeric fields (docs/CONFIG.md), chosen so that no value a file can hold
// makes a rank allocate past reason or overflow a sum. The CLI flags of the same meaning
// (`weightcast group init`, `journal publish`) use the same bounds.
inline constexpr uint64_t kMaxAnchorEvery = 4294967295;  // past it, "never" is the same
inline constexpr uint32_t kMaxRetainAnchors = 4096;      // each is a model-sized directory
inline constexpr uint32_t kMaxInFlight = 1024;           // each holds a delta in memory
inline constexpr uint32_t kMaxTimeoutMs = 86'400'000;    // a day, for every wait and interval
// The synthetic model needs 6 bytes per parameter and never exceeds Qwen3-30B-A3B's shapes
// (about 30.5 G parameters); 32 Gi parameters is the cap a file may ask for.
inline constexpr uint64_t kMaxDemoParameters = uint64_t{32} << 30;
inline constexpr uint64_t kMinDemoParameters = 1024;
inline constexpr uint64_t kMaxDemoVersions = 1'000'000'000;
inline constexpr double kMaxDemoDensity = 0.5;

// `source` names the text in errors (usually the path); `base_dir` resolves relative paths
// (journal root, key files); empty leaves them as written.
Result<proto::GroupConfig> parse_group_config(std::string_view yaml_text, std::string_view source,
                                              std::string_view base_dir,
                                              const GroupConfigLimits& limits = {});

// Reads and parses `path` (relative paths resolve against its directory).
Result<proto::GroupConfig> load_group_config(const std::string& path,
                                             const GroupConfigLimits& limits = {});

// Where a publisher on this host serves UCX reads from, for the group's ucx.publisher_memory
// ("auto" or empty: in place on a host with RDMA devices, where the fabric reads the buffers
// directly; copies in shared memory elsewhere, which subscribers on the host map:
// docs/DECISIONS.md). True for copies.
bool ucx_live_serves_copies(const std::string& publisher_memory);

// The entry of `rank` (kNotFound naming the rank and the ranks the config has).
Result<proto::RankConfig> find_rank(const proto::GroupConfig& config, uint32_t rank);

}  // namespace weightcast
