#include "src/endpoint/group_credit.h"

#include <algorithm>
#include <utility>

#include "src/control/wait_reporter.h"

namespace weightcast {

GroupCredit::GroupCredit(uint32_t max_in_flight, std::string coordinator, ControlLog log)
    : limit_(std::max<uint32_t>(1, max_in_flight)),
      coordinator_(std::move(coordinator)),
      log_(std::move(log)) {}

void GroupCredit::on_message(const proto::Envelope& m) {
  uint64_t committed = 0;
  if (m.has_commit()) {
    committed = m.commit().version();
  } else if (m.has_welcome() && m.welcome().has_committed()) {
    committed = m.welcome().committed_version();
  } else {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!committed_ || committed > *committed_) committed_ = committed;
  uncommitted_.erase(uncommitted_.begin(), uncommitted_.upper_bound(committed));
  cv_.notify_all();
}

void GroupCredit::offered(uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  uncommitted_.insert(version);
}

Status GroupCredit::wait_for_credit(uint64_t version, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  WaitReporter waiting(log_);
  while (uncommitted_.size() >= limit_ && !stopping_) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded(
          "version " + std::to_string(version) + ": " + std::to_string(uncommitted_.size()) +
          " published versions still uncommitted after " + std::to_string(timeout.count()) +
          " ms (max_in_flight " + std::to_string(limit_) + ")");
    }
    cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                std::chrono::milliseconds(500)));
    waiting.report("publisher: version " + std::to_string(version) + " waits for " +
                   std::to_string(uncommitted_.size()) +
                   " published versions to be committed (max_in_flight " + std::to_string(limit_) +
                   "; is the coordinator at " + coordinator_ + " reachable?)");
  }
  if (stopping_) {
    return failed_precondition("publisher stopping: version " + std::to_string(version) +
                               " was not published");
  }
  return ok_status();
}

std::optional<uint64_t> GroupCredit::committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

Status GroupCredit::wait_committed(uint64_t version, std::chrono::steady_clock::time_point deadline,
                                   const std::function<std::optional<std::string>()>& fatal) const {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<std::string> why;
  const bool reached = cv_.wait_until(lock, deadline, [&] {
    if (fatal) why = fatal();
    return (committed_ && *committed_ >= version) || why.has_value();
  });
  if (why) return failed_precondition(*why);
  if (!reached) {
    return deadline_exceeded("version " + std::to_string(version) +
                             " not committed before the deadline (committed: " +
                             (committed_ ? std::to_string(*committed_) : "none") + ")");
  }
  return ok_status();
}

void GroupCredit::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
}

}  // namespace weightcast
