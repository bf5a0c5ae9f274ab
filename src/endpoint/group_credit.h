// The group's commits and back-pressure as a publisher sees them (docs/ARCHITECTURE.md §1): the
// versions it offered that the group has not committed yet, and the last version the
// coordinator said the group committed (a Commit, or the committed version of a Welcome, so a
// publisher that (re)joins after a commit does not wait for it forever). A publication waits
// for credit: fewer than max_in_flight offered versions uncommitted. Shared by the publisher of
// a whole model (publisher.h) and the lead of several publisher ranks (shard_publisher.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "codec/base/status.h"
#include "src/control/zmq_channel.h"
#include "weightcast/control.pb.h"

namespace weightcast {

class GroupCredit {
 public:
  // `coordinator` names the endpoint in the waiting lines `log` gets (at a bounded rate).
  GroupCredit(uint32_t max_in_flight, std::string coordinator, ControlLog log);

  // Takes a Commit, or a Welcome carrying the committed version; other messages are ignored.
  void on_message(const proto::Envelope& message);
  // `version` was offered: it holds credit until the group commits it.
  void offered(uint64_t version);

  // Waits until fewer than max_in_flight offered versions are uncommitted: kDeadlineExceeded
  // after `timeout` (naming the count and the limit), kFailedPrecondition once stop() ran.
  Status wait_for_credit(uint64_t version, std::chrono::milliseconds timeout);

  std::optional<uint64_t> committed() const;
  // Until the group committed `version` or later, `deadline` passes (kDeadlineExceeded), or
  // `fatal` (checked at every wake-up; may be empty) returns a reason (kFailedPrecondition).
  Status wait_committed(uint64_t version, std::chrono::steady_clock::time_point deadline,
                        const std::function<std::optional<std::string>()>& fatal) const;

  // Ends every credit wait; later ones fail at once.
  void stop();

 private:
  const uint32_t limit_;
  const std::string coordinator_;
  ControlLog log_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::set<uint64_t> uncommitted_;
  std::optional<uint64_t> committed_;
  bool stopping_ = false;
};

}  // namespace weightcast
