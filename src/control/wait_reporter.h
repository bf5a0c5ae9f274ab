// Says what a long wait is waiting for, at a bounded rate: nothing for the first
// `first_after` (a wait that ends quickly stays silent), then one line, then one every
// `every`, each with the time waited so far. Used by every loop that waits on something
// outside the process (a coordinator, a journal, credit), so that no wait is silent and none
// floods a log. One waiter owns an instance (not thread safe).
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace weightcast {

class WaitReporter {
 public:
  using Clock = std::chrono::steady_clock;
  using Log = std::function<void(const std::string&)>;

  explicit WaitReporter(Log log, std::chrono::milliseconds first_after = std::chrono::seconds(3),
                        std::chrono::milliseconds every = std::chrono::seconds(30),
                        std::function<Clock::time_point()> now = {});

  // Called on each turn of the wait loop: prints "<what> (waiting N s)" when a line is due.
  // Returns whether it printed.
  bool report(const std::string& what);
  // The same, building the line only when one is due (for lines that cost something to make).
  bool report(const std::function<std::string()>& what);
  // The wait is over: the next report() starts timing a new one.
  void restart();

 private:
  Clock::time_point now() const { return now_ ? now_() : Clock::now(); }

  Log log_;
  std::chrono::milliseconds first_after_, every_;
  std::function<Clock::time_point()> now_;
  Clock::time_point started_{};
  Clock::time_point last_{};
  bool running_ = false;
  bool printed_ = false;
};

}  // namespace weightcast
