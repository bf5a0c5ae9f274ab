// The `demo:` section of the group config (docs/CONFIG.md), read by parse_group_config.
#include "src/control/group_config_demo.h"

#include <limits>
#include <string>

#include "src/control/group_config.h"

namespace weightcast {
namespace {

// Defaults of the optional demo section (docs/CONFIG.md).
constexpr uint64_t kDefaultDemoParameters = 268435456;
constexpr double kDefaultDemoDensity = 0.01;
constexpr uint64_t kDefaultDemoVersions = 20;
constexpr uint64_t kDefaultDemoSeed = 1;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

using yaml_field::describe;

}  // namespace

Status parse_demo_section(const YamlFieldReader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  if (!n.IsDefined()) return ok_status();
  RETURN_IF_ERROR(r.mapping(n, "demo",
                            {"parameters", "density", "versions", "seed", "step_interval_ms",
                             "publisher_mode", "figures_path"}));
  auto* d = cfg.mutable_demo();
  ASSIGN_OR_RETURN(uint64_t params, r.uint_field(n, "demo", "parameters", kDefaultDemoParameters,
                                                 kMinDemoParameters, kMaxDemoParameters));
  ASSIGN_OR_RETURN(uint64_t versions,
                   r.uint_field(n, "demo", "versions", kDefaultDemoVersions, 1, kMaxDemoVersions));
  ASSIGN_OR_RETURN(uint64_t seed, r.uint_field(n, "demo", "seed", kDefaultDemoSeed, 0, kU64Max));
  ASSIGN_OR_RETURN(uint64_t step, r.uint_field(n, "demo", "step_interval_ms", 0, 0, kMaxTimeoutMs));
  double density = kDefaultDemoDensity;
  if (n["density"].IsDefined()) {
    ASSIGN_OR_RETURN(density, r.real(n["density"], "demo.density"));
    if (!(density > 0 && density <= kMaxDemoDensity)) {
      return r.fail("demo.density", describe(n["density"]) + " is not in (0, 0.5]");
    }
  }
  d->set_parameters(params);
  d->set_density(density);
  d->set_versions(versions);
  d->set_seed(seed);
  d->set_step_interval_ms(static_cast<uint32_t>(step));
  if (n["publisher_mode"].IsDefined()) {
    ASSIGN_OR_RETURN(std::string mode, r.str(n["publisher_mode"], "demo.publisher_mode"));
    if (mode != "snapshot" && mode != "hooked") {
      return r.fail("demo.publisher_mode", "'" + mode + "' is not snapshot or hooked");
    }
    d->set_publisher_mode(mode);
  }
  if (n["figures_path"].IsDefined()) {
    ASSIGN_OR_RETURN(*d->mutable_figures_path(), r.str(n["figures_path"], "demo.figures_path"));
  }
  return ok_status();
}

}  // namespace weightcast
