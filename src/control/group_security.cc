#include "src/control/group_security.h"

#include "src/control/curve_keys.h"
#include "src/control/group_config.h"

namespace weightcast {
namespace {

Result<CurveClientOptions> client_from_file(const proto::GroupConfig& config,
                                            const std::string& key_file, const std::string& who) {
  CurveClientOptions curve;
  if (!config.curve().enabled()) return curve;
  if (key_file.empty()) {
    return invalid_argument(who + " has no CURVE key file in the group config (curve is enabled)");
  }
  ASSIGN_OR_RETURN(CurveKeyPair pair, read_curve_key_file(key_file));
  curve.enabled = true;
  curve.server_public_z85 = config.curve().coordinator_public_key();
  curve.public_z85 = pair.public_z85;
  curve.secret_z85 = pair.secret_z85;
  return curve;
}

}  // namespace

Result<CurveServerOptions> coordinator_curve(const proto::GroupConfig& config) {
  CurveServerOptions curve;
  if (!config.curve().enabled()) return curve;
  ASSIGN_OR_RETURN(CurveKeyPair pair, read_curve_key_file(config.curve().coordinator_key_file()));
  if (pair.public_z85 != config.curve().coordinator_public_key()) {
    return invalid_argument("coordinator key file " + config.curve().coordinator_key_file() +
                            " does not hold curve.coordinator_public_key of the group config");
  }
  curve.enabled = true;
  curve.public_z85 = pair.public_z85;
  curve.secret_z85 = pair.secret_z85;
  for (const auto& r : config.ranks()) {
    if (!r.public_key().empty()) curve.authorized_public_z85.insert(r.public_key());
  }
  for (const auto& k : config.curve().authorized_keys()) curve.authorized_public_z85.insert(k);
  if (!config.curve().observer_key_file().empty()) {
    auto observer = read_curve_key_file(config.curve().observer_key_file());
    if (observer.ok()) curve.authorized_public_z85.insert(observer->public_z85);
  }
  return curve;
}

Result<CurveClientOptions> rank_curve(const proto::GroupConfig& config, uint32_t rank) {
  ASSIGN_OR_RETURN(proto::RankConfig entry, find_rank(config, rank));
  return client_from_file(config, entry.key_file(), "rank " + std::to_string(rank));
}

Result<CurveClientOptions> observer_curve(const proto::GroupConfig& config,
                                          const std::string& key_file) {
  return client_from_file(config, key_file.empty() ? config.curve().observer_key_file() : key_file,
                          "the observer");
}

}  // namespace weightcast
