// A rank's connection to the coordinator: a ControlClient owned by one background thread
// that says Hello (again whenever the coordinator does not know it, e.g. after the
// coordinator restarted), sends heartbeats, queues messages other threads send, and hands
// every other incoming message to a callback (on that thread).
//
// A fatal refusal (no common protocol, rank not in the config, wrong role) or a refused CURVE
// key stops the link; fatal_error() then names the reason. Every Hello carries a random
// per-process nonce, so the coordinator tells a second process claiming this rank from this
// one reconnecting. While no Welcome has come, the link says so at a bounded rate (first
// after 3 s, then every 30 s), naming the coordinator's endpoint and the last refusal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "codec/base/status.h"
#include "src/control/rate_limited_log.h"
#include "src/control/wait_reporter.h"
#include "src/control/zmq_channel.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

struct RankLinkOptions {
  uint32_t rank = 0;
  proto::Role role = proto::ROLE_UNSPECIFIED;
  std::vector<std::string> transports{"fs"};
  uint32_t protocol_min = 0;  // 0: this build's kProtocolMin / kProtocolMax
  uint32_t protocol_max = 0;
  std::chrono::milliseconds heartbeat{500};
  std::chrono::milliseconds hello_retry{1000};
  ControlLog log;
  // The journal the held version belongs to (Hello.held_journal_id); unset: none said.
  std::function<std::string()> held_journal;
};

class RankLink {
 public:
  using Handler = std::function<void(const proto::Envelope&)>;
  // The version the rank holds (subscriber: verified in memory; publisher: last published).
  using HeldVersion = std::function<std::optional<uint64_t>()>;

  // Connects to the group's coordinator with this rank's CURVE keys and starts the thread.
  static Result<std::unique_ptr<RankLink>> start(const proto::GroupConfig& config,
                                                 RankLinkOptions options, Handler handler,
                                                 HeldVersion held);
  ~RankLink();

  // Queues `message` (rank and protocol are filled in); thread safe.
  void send(proto::Envelope message);

  // Waits for the coordinator's Welcome (the latest one after re-Hellos).
  Result<proto::Welcome> wait_welcome(std::chrono::steady_clock::time_point deadline);
  std::optional<proto::Welcome> welcome() const;

  std::optional<std::string> fatal_error() const;

  // Sends Leave (when `reason` is set), flushes for up to `flush`, and stops the thread.
  void stop(const std::string& reason = "",
            std::chrono::milliseconds flush = std::chrono::milliseconds(500));

 private:
  RankLink(RankLinkOptions options, std::string endpoint, std::unique_ptr<ControlClient> client,
           Handler handler, HeldVersion held);
  void loop();
  void say_hello();
  void handle(const proto::Envelope& message);
  proto::Envelope envelope() const;

  RankLinkOptions options_;
  std::unique_ptr<ControlClient> client_;
  Handler handler_;
  HeldVersion held_;
  uint32_t protocol_ = 0;
  std::string endpoint_;
  uint64_t nonce_ = 0;
  // The link thread's only:
  std::chrono::steady_clock::time_point last_hello_{};
  std::string last_refusal_;
  WaitReporter waiting_;
  RateLimitedLog refusal_log_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<proto::Envelope> outbox_;
  std::optional<proto::Welcome> welcome_;
  uint64_t welcome_count_ = 0;
  std::optional<std::string> fatal_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leaving_{false};  // Leave queued: no more Hellos or heartbeats
  int wake_fd_ = -1;                  // eventfd: send() wakes the loop out of its receive wait
  std::thread thread_;
};

}  // namespace weightcast
