// The control plane's sockets (docs/DECISIONS.md, "Rank group"): the coordinator binds a ROUTER
// (ControlServer), every rank and `weightcast group status` connect a DEALER (ControlClient). One
// Envelope per frame (messages.h).
//
// Security: with CURVE enabled the server is a CURVE server with the coordinator's secret
// key and a ZAP handler that admits only the configured public keys; a refused peer is
// logged with its key and never reaches receive(). Clients learn of a refusal through
// auth_failure(). Malformed, oversized or wrongly framed messages are dropped with a log
// line and counted (dropped()), never returned and never fatal. Refusals and drops are logged
// a few per interval and then as counts (rate_limited_log.h): peers can repeat them at will.
//
// Threading: a channel is used by one thread at a time (ZeroMQ sockets are not thread
// safe). Every wait takes a timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "codec/base/status.h"
#include "src/control/messages.h"

namespace weightcast {

// Where log lines go (weightcastd: spdlog); null: nowhere. A CURVE server also calls it
// from its ZAP thread (refusals), so it must be thread safe.
using ControlLog = std::function<void(const std::string&)>;

struct CurveServerOptions {
  bool enabled = false;
  std::string public_z85;
  std::string secret_z85;
  std::set<std::string> authorized_public_z85;  // Z85 keys admitted by the ZAP handler
};

struct CurveClientOptions {
  bool enabled = false;
  std::string server_public_z85;
  std::string public_z85;
  std::string secret_z85;
};

struct IncomingMessage {
  std::string peer;  // ROUTER identity of the sender, for send()
  proto::Envelope message;
  std::string peer_key;  // the sender's CURVE public key (Z85); empty without CURVE
};

class ControlServer {
 public:
  // Binds a ROUTER at `endpoint` ("tcp://127.0.0.1:5555", "tcp://127.0.0.1:*" for any free
  // port, "ipc:///path"); errors name the endpoint. With `listen_fd` >= 0 the ROUTER serves
  // that already listening TCP socket instead (listen_socket.h checks it first); the call
  // takes it either way: the server closes it when destroyed, a refusal closes it at once.
  static Result<std::unique_ptr<ControlServer>> bind(const std::string& endpoint,
                                                     const CurveServerOptions& curve,
                                                     const MessageLimits& limits = {},
                                                     ControlLog log = nullptr, int listen_fd = -1);
  ~ControlServer();

  // The endpoint actually bound (with the port chosen for "*").
  const std::string& endpoint() const;

  // The next valid message, or nullopt when none arrived within `timeout`.
  Result<std::optional<IncomingMessage>> receive(std::chrono::milliseconds timeout);

  // Queues `message` for `peer`; an unknown or gone peer is not an error (ROUTER drops it).
  Status send(const std::string& peer, const proto::Envelope& message);

  uint64_t dropped() const;        // malformed/oversized frames dropped
  uint64_t refused_peers() const;  // ZAP refusals

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class ControlClient {
 public:
  // Connects a DEALER to `endpoint` (connection is asynchronous: an absent coordinator is
  // not an error here, receive() just times out and ZeroMQ keeps reconnecting).
  static Result<std::unique_ptr<ControlClient>> connect(const std::string& endpoint,
                                                        const CurveClientOptions& curve,
                                                        const MessageLimits& limits = {},
                                                        ControlLog log = nullptr);
  ~ControlClient();

  Status send(const proto::Envelope& message);
  // Waits up to `timeout` for a message; returns early with none when `wake_fd` (an eventfd,
  // or -1) becomes readable, which the caller then drains: how a sender on another thread
  // gets its message out at once instead of after the timeout.
  Result<std::optional<proto::Envelope>> receive(std::chrono::milliseconds timeout,
                                                 int wake_fd = -1);

  // Set once the server refused this client's CURVE handshake (wrong or unknown key): the
  // reason, naming the endpoint. Checked by receive() callers that time out.
  std::optional<std::string> auth_failure() const;

  uint64_t dropped() const;

 private:
  struct Impl;
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast
