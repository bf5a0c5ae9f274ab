// libFuzzer target: parse_group_config on arbitrary bytes (empty base_dir). The invariants
// checked on every input: a refusal carries a message naming the source; an accepted config
// has exactly one coordinator rank and at least one publisher, unique ranks, an endpoint and
// a bind, 1..N distinct transports, max_in_flight >= 1, retain_anchors >= 1, heartbeat_ms >= 1
// and dead_after_ms > 2 * heartbeat_ms, a demo density in (0, 0.5] when there is a demo, and
// Z85 keys for every rank when CURVE is on. Anything else, or a crash, aborts.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "src/control/curve_keys.h"
#include "src/control/group_config.h"
#include "tests/fuzz/fuzz_reach.h"

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kNotYaml, kRefused, kAccepted };
}  // namespace

std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"too large, or not YAML (yaml-cpp refuses the text)", 10},
      {"YAML refused by the schema or the cross-field checks", 15},
      {"accepted, and every invariant holds", 1},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

// parse_group_config's first checks, independently: the size limit, then yaml-cpp loads the
// text. A refusal is "<source>: line L, column C: ..." when yaml-cpp threw (its parser marks
// every error it raises) and "<source>: <field>: ..." when a field or cross-field check
// refused, which is past the load; only the first form may be either, and loading the text
// again tells (loading every refused text again would add half the run's time).
bool past_yaml_load(std::string_view text, const std::string& refusal) {
  if (text.size() > weightcast::GroupConfigLimits{}.max_file_bytes) return false;
  if (!refusal.starts_with("fuzz.yaml: line ")) return true;
  try {
    (void)YAML::Load(std::string(text));
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_group_config(text, "fuzz.yaml", "");
  if (!parsed.ok()) {
    const std::string& msg = parsed.status().message();
    if (msg.empty() || msg.find("fuzz.yaml") == std::string::npos) std::abort();
    fuzzing::fuzz_reached(past_yaml_load(text, msg) ? fuzzing::kRefused : fuzzing::kNotYaml);
    return 0;
  }
  const proto::GroupConfig& c = *parsed;
  if (c.group_id().empty() || c.coordinator_endpoint().empty() || c.coordinator_bind().empty() ||
      c.journal_root().empty()) {
    std::abort();
  }
  if (c.transports_size() < 1) std::abort();
  if (std::set<std::string>(c.transports().begin(), c.transports().end()).size() !=
      static_cast<size_t>(c.transports_size())) {
    std::abort();
  }
  if (c.max_in_flight() < 1 || c.retain_anchors() < 1) std::abort();
  const auto& t = c.timeouts();
  if (t.heartbeat_ms() < 1 || uint64_t{t.dead_after_ms()} <= 2 * uint64_t{t.heartbeat_ms()}) {
    std::abort();
  }
  if (c.has_demo() && !(c.demo().density() > 0 && c.demo().density() <= 0.5)) std::abort();

  int coordinators = 0, publishers = 0;
  std::set<uint32_t> ranks;
  for (const auto& r : c.ranks()) {
    coordinators += r.role() == proto::ROLE_COORDINATOR;
    publishers += r.role() == proto::ROLE_PUBLISHER;
    if (!ranks.insert(r.rank()).second) std::abort();
    if (!find_rank(c, r.rank()).ok()) std::abort();
    if (c.curve().enabled() && (r.key_file().empty() || !is_z85_key(r.public_key()))) {
      std::abort();
    }
  }
  if (coordinators != 1 || publishers < 1) std::abort();
  if (c.curve().enabled() && !is_z85_key(c.curve().coordinator_public_key())) std::abort();
  fuzzing::fuzz_reached(fuzzing::kAccepted);
  return 0;
}
