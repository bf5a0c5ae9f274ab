#include "tests/fuzz/group_config_fuzz_seeds.h"

#include <string>

namespace weightcast::fuzzing {
namespace {

// Minimal: everything optional left to its default.
constexpr char kMinimal[] = R"(group_id: demo
coordinator:
  endpoint: tcp://127.0.0.1:5555
journal:
  root: journal
ranks:
  - {rank: 0, role: coordinator, host: 127.0.0.1}
  - {rank: 1, role: publisher, host: 127.0.0.1}
  - {rank: 2, role: subscriber}
)";

// Every section, CURVE on (RFC 26 test keys) and a demo model.
constexpr char kFull[] = R"(group_id: rl-run.7
coordinator:
  endpoint: tcp://coord.example:5555
  bind: tcp://*:5555
journal:
  root: /data/journal
  anchor_every: 5
  retain_anchors: 2
transports: [nccl, ucx, fs]
ucx: {tls: "^cuda_ipc,shm,tcp"}
nccl: {bucket_bytes: 268435456, buffers: 2, timeout_ms: 5000, env: {NCCL_DEBUG: WARN}}
max_in_flight: 3
timeouts: {heartbeat_ms: 250, dead_after_ms: 2000, ack_timeout_ms: 30000, lease_ttl_ms: 600000}
curve:
  enabled: true
  coordinator_public_key: 'Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID'
  coordinator_key_file: keys/coordinator.key
  authorized_keys: ['rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7']
  observer_key_file: keys/observer.key
ranks:
  - {rank: 0, role: coordinator, host: coord.example, key_file: keys/rank0.key,
     public_key: 'Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID'}
  - {rank: 1, role: publisher, host: trainer-0, key_file: keys/rank1.key,
     public_key: 'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7'}
  - {rank: 2, role: subscriber, host: infer-0, key_file: keys/rank2.key,
     public_key: 'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7', layout: tp2, part: 0, replica: e0}
  - {rank: 3, role: subscriber, host: infer-1, key_file: keys/rank3.key,
     public_key: 'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7', layout: tp2, part: 1, replica: e0}
layouts:
  - name: tp2
    parts: 2
    rules:
      - {match: '.*\.(q|k|v|gate|up)_proj\.weight', dim: 0}
      - {match: '.*norm.*', whole: true}
demo:
  parameters: 268435456
  density: 0.01
  versions: 20
  seed: 1
  step_interval_ms: 0
)";

// Flow style throughout, an ipc endpoint, CURVE present but disabled, a partial demo.
constexpr char kFlow[] =
    "{group_id: g, coordinator: {endpoint: 'ipc:///tmp/wc.sock'}, journal: {root: j, "
    "anchor_every: 0}, transports: [fs], max_in_flight: 1, curve: {enabled: false}, "
    "ranks: [{rank: 4294967295, role: publisher}, {rank: 0, role: coordinator}], "
    "demo: {density: 0.5, parameters: 1024}}\n";

// Anchors and aliases (the ranks share one host string) and comments.
constexpr char kAliases[] = R"(# a group with YAML anchors
group_id: anchors
coordinator: {endpoint: &ep "tcp://[::1]:6000", bind: *ep}
journal: {root: /j, retain_anchors: 1}
timeouts: {heartbeat_ms: 1, dead_after_ms: 3}
ranks:
  - {rank: 10, role: coordinator, host: &h node-a}
  - {rank: 11, role: publisher, host: *h}
  - {rank: 12, role: subscriber, host: *h}
  - {rank: 13, role: subscriber, host: *h}
)";

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

}  // namespace

std::vector<std::vector<uint8_t>> make_group_config_seeds() {
  return {bytes(kMinimal), bytes(kFull), bytes(kFlow), bytes(kAliases)};
}

}  // namespace weightcast::fuzzing
