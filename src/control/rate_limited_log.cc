// Per-key burst limiting of repeated log lines (rate_limited_log.h).
#include "src/control/rate_limited_log.h"

#include <algorithm>
#include <utility>

namespace weightcast {
namespace {

using TimePoint = std::chrono::steady_clock::time_point;

std::string with_count(const std::string& summary, uint64_t count) {
  std::string out = summary;
  const size_t at = out.find("{}");
  if (at == std::string::npos) return out + " (" + std::to_string(count) + " times)";
  return out.replace(at, 2, std::to_string(count));
}

}  // namespace

RateLimitedLog::RateLimitedLog(Sink sink, RateLimitOptions options, Clock clock)
    : sink_(std::move(sink)),
      options_(options),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })) {}

bool RateLimitedLog::log(const std::string& key, const std::string& line,
                         const std::string& summary, const std::string& detail) {
  const TimePoint now = clock_();
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, fresh] = keys_.try_emplace(key);
  KeyState& state = it->second;
  if (fresh) state.window_start = now;
  if (now - state.window_start >= options_.interval) end_interval(state, now);
  ++state.total;
  state.summary = summary;
  if (state.written_in_window < options_.burst) {
    ++state.written_in_window;
    if (sink_) sink_(line);
    return true;
  }
  ++state.suppressed;
  state.last_detail = detail;
  return false;
}

void RateLimitedLog::poll() {
  const TimePoint now = clock_();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, state] : keys_) {
    if (state.suppressed > 0 && now - state.window_start >= options_.interval) {
      end_interval(state, now);
    }
  }
}

void RateLimitedLog::flush() {
  const TimePoint now = clock_();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, state] : keys_) {
    if (state.suppressed > 0) end_interval(state, now);
  }
}

uint64_t RateLimitedLog::total(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = keys_.find(key);
  return it == keys_.end() ? 0 : it->second.total;
}

void RateLimitedLog::end_interval(KeyState& state, TimePoint now) {
  if (state.suppressed > 0 && sink_) {
    // Whole seconds, rounded up: every suppressed event happened within that span.
    const auto span = now - state.window_start;
    const int64_t seconds =
        std::max<int64_t>(1, std::chrono::ceil<std::chrono::seconds>(span).count());
    sink_(with_count(state.summary, state.suppressed) + " in the last " + std::to_string(seconds) +
          " s (last: " + state.last_detail + ")");
  }
  state.window_start = now;
  state.written_in_window = 0;
  state.suppressed = 0;
  state.last_detail.clear();
}

}  // namespace weightcast
