// What weightcastd runs for each role (weightcastd_main.cc parses the command line and the
// config; these loops run until the stop predicate fires or their work is done).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "codec/base/status.h"
#include "src/control/zmq_channel.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

struct DaemonOptions {
  uint32_t rank = 0;
  size_t threads = 0;
  uint64_t start_version = 0;
  bool stay = false;   // publisher: keep running after the last demo version
  int listen_fd = -1;  // coordinator: an inherited listening socket (--listen-fd)
  ControlLog log;
  std::function<bool()> stop_requested;  // SIGTERM/SIGINT seen
};

// One line to the daemon's log, when it has one.
inline void say(const DaemonOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

// Whether SIGTERM/SIGINT was seen.
inline bool stopping(const DaemonOptions& o) {
  return o.stop_requested && o.stop_requested();
}

Status run_coordinator_rank(const proto::GroupConfig& config, const DaemonOptions& options);

// Publishes the config's demo model: versions start_version.. (or the journal head + 1 after
// a restart, replaying the model's steps to reach it) up to start_version + demo.versions,
// then waits for the last commit.
Status run_publisher_rank(const proto::GroupConfig& config, const DaemonOptions& options);

// Holds the journal's tensors and follows every version until stopped.
Status run_subscriber_rank(const proto::GroupConfig& config, const DaemonOptions& options);

}  // namespace weightcast
