// Asking a running coordinator how its group stands (`weightcast group status`, the demo's
// live table), and printing the answer.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "codec/base/status.h"
#include "weightcast/control.pb.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

// Connects as an observer (with `key_file`, or the config's observer key when empty) and
// waits up to `timeout` for the coordinator's StatusReply. Errors say whether the
// coordinator was unreachable, refused the key, or answered something else.
Result<proto::StatusReply> query_group_status(const proto::GroupConfig& config,
                                              const std::string& key_file,
                                              std::chrono::milliseconds timeout);

// The reply as JSON (`weightcast group status --json`). Each version lists "results" (rank ->
// result) and "subscribers" (per rank: result, transport, apply_us, bytes_read, bytes_written,
// peak_rss_bytes, engine_bytes; 0 where the ack did not report it), and the publisher's
// publisher_peak_rss_bytes and publisher_model_bytes from its offer.
nlohmann::json status_to_json(const proto::StatusReply& status);

// Head, committed, anchor, then one line per member: rank, role, state, version, transport,
// lag, last heartbeat.
std::string format_status(const proto::StatusReply& status);

}  // namespace weightcast
