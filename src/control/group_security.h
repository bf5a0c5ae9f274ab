// The CURVE settings of each socket, derived from the group config and the key files it names.
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"
#include "src/control/zmq_channel.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

// The coordinator's server keys and the public keys it admits: every rank's, the observer
// key file's and `curve.authorized_keys`. Disabled when the config does not enable CURVE.
Result<CurveServerOptions> coordinator_curve(const proto::GroupConfig& config);

// The client keys of `rank` (its key file).
Result<CurveClientOptions> rank_curve(const proto::GroupConfig& config, uint32_t rank);

// The client keys of an observer (`weightcast group status`): `key_file`, or the config's
// observer key file when empty.
Result<CurveClientOptions> observer_curve(const proto::GroupConfig& config,
                                          const std::string& key_file);

}  // namespace weightcast
