// The one deadline type of the public API: every wait takes an absolute point on the
// monotonic clock, so a loop of waits shares one budget and a wall-clock jump changes nothing.
#pragma once

#include <chrono>

namespace weightcast::api {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// `timeout` from now.
template <typename Rep, typename Period>
Deadline deadline_after(std::chrono::duration<Rep, Period> timeout) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
}

// A deadline that never comes in practice (a hundred years from now; not time_point::max(),
// which some condition-variable implementations overflow on).
inline Deadline no_deadline() {
  return Clock::now() + std::chrono::hours(24 * 365 * 100);
}

}  // namespace weightcast::api
