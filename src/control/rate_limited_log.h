// A log sink that bounds how many lines a repeated event can write. Per key (a category such
// as "refused-peer"), the first `burst` events of an interval are written in full; the rest
// are counted, and once the interval is over one summary line reports them:
//   "control: refused 1234 connections from unauthenticated peers in the last 10 s
//    (last: CURVE key ... from 10.0.0.7)"
// So a peer that repeats an event at will (an unauthenticated client reconnecting, a
// subscriber nacking) cannot make one key write more than burst + 1 lines per interval.
// Summaries are written by the key's next event after its interval, by poll() (for a caller
// with a loop of its own, so a burst that stops is still reported) and by flush().
//
// Thread safe: every call takes one mutex, and the sink is called with it held, so lines of
// one limiter reach the sink in order and never concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace weightcast {

struct RateLimitOptions {
  uint32_t burst = 5;                         // lines per key per interval written in full
  std::chrono::milliseconds interval{10000};  // the window `burst` applies to
};

class RateLimitedLog {
 public:
  using Sink = std::function<void(const std::string&)>;
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `sink` receives every line that passes (null: lines are only counted). `clock` defaults to
  // std::chrono::steady_clock::now; tests inject a fake one.
  explicit RateLimitedLog(Sink sink, RateLimitOptions options = {}, Clock clock = nullptr);

  // Records one event of `key`: writes `line` while `key` is within its burst for the current
  // interval, else counts the event and keeps `detail` (the summary's "last: ..."). `summary`
  // is the summary line up to " in the last N s", with "{}" where the count goes, e.g.
  // "control: refused {} connections from unauthenticated peers". Returns whether `line` was
  // written.
  bool log(const std::string& key, const std::string& line, const std::string& summary,
           const std::string& detail);

  // Writes the summary of every key whose interval is over and that has suppressed events.
  void poll();

  // Writes the summary of every key with suppressed events now, interval over or not (a
  // server calls it when it stops, so the last count is not lost).
  void flush();

  // Events of `key` recorded so far, written or not.
  uint64_t total(const std::string& key) const;

 private:
  struct KeyState {
    std::chrono::steady_clock::time_point window_start;
    uint32_t written_in_window = 0;
    uint64_t suppressed = 0;  // since the last summary
    uint64_t total = 0;
    std::string summary;
    std::string last_detail;
  };
  // Writes `state`'s summary if it suppressed anything and starts a new interval at `now`.
  void end_interval(KeyState& state, std::chrono::steady_clock::time_point now);

  const Sink sink_;
  const RateLimitOptions options_;
  const Clock clock_;
  mutable std::mutex mutex_;
  std::map<std::string, KeyState> keys_;
};

}  // namespace weightcast
