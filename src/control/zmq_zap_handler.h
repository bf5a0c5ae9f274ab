// The ZAP 1.0 handler (RFC 27) behind a CURVE ControlServer: admits only the configured
// client public keys. ZeroMQ asks the handler bound at "inproc://zeromq.zap.01" in the
// server socket's context during every CURVE handshake; a refused client never completes
// its handshake, so none of its messages reach the server's receive().
//
// Refusals are logged through a RateLimitedLog (key "refused-peer"): any client can retry its
// handshake at will, so a line per refusal would let it grow the coordinator's log without
// bound. The first `log_limit.burst` refusals of an interval are logged in full, the rest as
// one count per interval.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "codec/base/status.h"
#include "src/control/rate_limited_log.h"
#include "src/control/zmq_channel.h"

namespace weightcast {

class ZapHandler {
 public:
  // Binds the ZAP endpoint in `context` and starts answering on a thread. Must be called
  // before any CURVE server socket of `context` binds: without a handler libzmq admits every
  // key. `log` is called from the handler's thread (and from the destructor's, for the last
  // summary of refusals).
  static Result<std::unique_ptr<ZapHandler>> start(zmq::context_t& context,
                                                   std::set<std::string> authorized_z85,
                                                   ControlLog log, RateLimitOptions log_limit = {});
  // Stops the thread (within one poll interval), logs the count of refusals not yet
  // reported and closes the socket; the context must still be alive.
  ~ZapHandler();

  uint64_t refused() const { return refused_.load(); }

 private:
  ZapHandler(zmq::socket_t socket, std::set<std::string> authorized_z85, ControlLog log,
             RateLimitOptions log_limit);
  void run();
  void answer(std::vector<zmq::message_t>& request);
  void refuse(const std::string& line, const std::string& detail);

  zmq::socket_t socket_;
  const std::set<std::string> authorized_;
  const ControlLog log_;
  RateLimitedLog refusal_log_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace weightcast
