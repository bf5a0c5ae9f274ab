// The coordinator process's loop: a ControlServer bound at the group's coordinator endpoint,
// the CoordinatorState fed with its messages and a clock tick, and the journal's HEAD polled
// so that a restarted coordinator starts from the head and a version committed to the
// journal but never offered (its publisher died in between) is still offered.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "codec/base/status.h"
#include "src/control/coordinator_state.h"
#include "src/control/rate_limited_log.h"
#include "src/control/zmq_channel.h"
#include "weightcast/group_config.pb.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

struct CoordinatorOptions {
  std::chrono::milliseconds tick{50};
  std::chrono::milliseconds journal_poll{200};
  std::chrono::milliseconds offer_grace{2000};  // HEAD ahead of every offer for this long
  ControlLog log;                               // one line per event
  // An inherited listening TCP socket to serve instead of binding the endpoint
  // (weightcastd --listen-fd; listen_socket.h); start() takes it, whether it succeeds or not.
  int listen_fd = -1;
};

class Coordinator {
 public:
  // Binds (the config's coordinator.bind, else its endpoint) and reads the journal HEAD.
  // Errors name the endpoint or the journal file at fault.
  static Result<std::unique_ptr<Coordinator>> start(const proto::GroupConfig& config,
                                                    CoordinatorOptions options = {});

  const std::string& endpoint() const { return server_->endpoint(); }

  // Serves until `stop` becomes true (checked every tick).
  Status run(const std::atomic<bool>& stop);

  // One step of run(): waits up to `wait` for a message, then ticks.
  Status step(std::chrono::milliseconds wait);

  const CoordinatorState& state() const { return state_; }

 private:
  Coordinator(proto::GroupConfig config, CoordinatorOptions options,
              std::unique_ptr<ControlServer> server);
  Status poll_journal();
  // Offers `version` to the group as its manifest in the journal describes it, for a version
  // published while its offer could not reach this coordinator.
  Status offer_from_manifest(uint64_t version, const proto::StepManifest& manifest,
                             const std::string& journal_id);
  // Offers from the journal every version after the head this coordinator knows and before
  // `version`, so that versions are offered (and committed or refused) one by one.
  Status offer_versions_before(uint64_t version, const std::string& journal_id);
  bool hello_key_matches(const IncomingMessage& incoming) const;
  Status send_all(std::vector<OutgoingMessage> out);
  void log_events();

  proto::GroupConfig config_;
  CoordinatorOptions options_;
  std::unique_ptr<ControlServer> server_;
  CoordinatorState state_;
  CoordinatorClock::time_point last_tick_{};
  CoordinatorClock::time_point last_poll_{};
  uint64_t unoffered_head_ = 0;
  CoordinatorClock::time_point unoffered_since_{};
  // A journal that stays unreadable and a peer that repeats a refused or faulty message
  // write a bounded number of lines (counted per kind of event).
  RateLimitedLog journal_log_;
  RateLimitedLog event_log_;
};

}  // namespace weightcast
