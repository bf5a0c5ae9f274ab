#include "src/control/wait_reporter.h"

#include <cstdio>
#include <utility>

namespace weightcast {

WaitReporter::WaitReporter(Log log, std::chrono::milliseconds first_after,
                           std::chrono::milliseconds every, std::function<Clock::time_point()> now)
    : log_(std::move(log)), first_after_(first_after), every_(every), now_(std::move(now)) {}

bool WaitReporter::report(const std::string& what) {
  return report([&what] { return what; });
}

bool WaitReporter::report(const std::function<std::string()>& what) {
  const Clock::time_point t = now();
  if (!running_) {
    running_ = true;
    printed_ = false;
    started_ = t;
  }
  if (t - started_ < first_after_) return false;
  if (printed_ && t - last_ < every_) return false;
  printed_ = true;
  last_ = t;
  if (!log_) return true;
  const double waited = std::chrono::duration<double>(t - started_).count();
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, " (waiting %.0f s)", waited);
  log_(what() + suffix);
  return true;
}

void WaitReporter::restart() {
  running_ = false;
}

}  // namespace weightcast
