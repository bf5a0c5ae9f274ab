// ControlServer (ROUTER) and ControlClient (DEALER) over ZeroMQ (zmq_channel.h).
//
// zmq::error_t never leaves this file: every public method converts it to a Status naming
// the endpoint. Each channel owns its context, so the ZAP endpoint and the monitor endpoint
// (both inproc) are private to it.
#include "src/control/zmq_channel.h"

#include <unistd.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <zmq.hpp>

#include "src/control/listen_socket.h"
#include "src/control/rate_limited_log.h"
#include "src/control/zmq_zap_handler.h"

namespace weightcast {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kZ85KeyChars = 40;
constexpr int kReconnectIvlMs = 100;
constexpr const char* kMonitorEndpoint = "inproc://weightcast.control.monitor";

Status zmq_failure(const std::string& what, const std::string& endpoint, const zmq::error_t& e) {
  const std::string m = "control: " + what + " " + endpoint + ": " + e.what();
  return e.num() == EINVAL || e.num() == EPROTONOSUPPORT ? invalid_argument(m) : io_error(m);
}

// A key option must be a 40-character Z85 key (32 bytes); libzmq's EINVAL would not say which.
Status check_key(const std::string& z85, const std::string& what, const std::string& endpoint) {
  std::array<uint8_t, 32> raw{};
  if (z85.size() == kZ85KeyChars && zmq_z85_decode(raw.data(), z85.c_str()) != nullptr)
    return ok_status();
  return invalid_argument("control: " + what + " for " + endpoint +
                          " is not a 40-character Z85 CURVE key (" + std::to_string(z85.size()) +
                          " characters)");
}

// ZMQ_MAXMSGSIZE: libzmq disconnects a peer sending a frame over this before it is
// buffered whole; frames between max_bytes and this are dropped after recv with a log line.
int64_t memory_guard(const MessageLimits& limits) {
  if (limits.max_bytes > static_cast<uint64_t>(INT64_MAX) / 2) return -1;
  return static_cast<int64_t>(limits.max_bytes) * 2;
}

// Receives one whole message (all its frames) without waiting; keeps the first
// `kept.size()` frames and returns the frame count (0: nothing was queued).
template <size_t N>
size_t recv_message(zmq::socket_t& socket, std::array<zmq::message_t, N>& kept) {
  size_t count = 0;
  for (bool more = true; more;) {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::dontwait)) break;
    more = part.more();
    if (count < N) kept[count] = std::move(part);
    ++count;
  }
  return count;
}

std::span<const uint8_t> bytes(const zmq::message_t& m) {
  return {static_cast<const uint8_t*>(m.data()), m.size()};
}

// "peer 00800041a7 (127.0.0.1)": the ROUTER identity in hex and, when known, the address.
std::string describe_peer(const zmq::message_t& identity, zmq::message_t* payload) {
  std::string out = "peer ";
  char hex[3];
  for (uint8_t b : bytes(identity)) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    out += hex;
  }
  const char* address =
      payload != nullptr ? zmq_msg_gets(payload->handle(), "Peer-Address") : nullptr;
  if (address != nullptr && *address != '\0') out += std::string(" (") + address + ")";
  return out;
}

Result<std::string> encode_for_send(const proto::Envelope& message, const MessageLimits& limits,
                                    const std::string& to) {
  if (message.body_case() == proto::Envelope::BODY_NOT_SET)
    return invalid_argument("control: refusing to send an envelope without a body to " + to);
  std::string payload = encode_envelope(message);
  if (payload.size() > limits.max_bytes) {
    return invalid_argument("control: " + body_name(message) + " of " +
                            std::to_string(payload.size()) + " bytes for " + to +
                            " is over the frame limit of " + std::to_string(limits.max_bytes));
  }
  return payload;
}

milliseconds remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? left : milliseconds{0};
}

}  // namespace

// ----------------------------------------------------------------------------- server

struct ControlServer::Impl {
  // Declaration order is destruction order reversed: the ROUTER closes, then the ZAP thread
  // stops, then the context terminates (it would block on a socket still open).
  zmq::context_t context;
  std::unique_ptr<ZapHandler> zap;
  zmq::socket_t router;
  std::string endpoint;
  MessageLimits limits;
  ControlLog log;
  // Any peer that connects can send garbage at will (without CURVE, anyone): drops are
  // logged a few per interval, the rest counted.
  std::unique_ptr<RateLimitedLog> drop_log;
  uint64_t dropped = 0;
  bool curve_enabled = false;

  void drop(const std::string& peer, const std::string& reason) {
    ++dropped;
    drop_log->log("dropped-message",
                  "control: dropped a message from " + peer + " on " + endpoint + ": " + reason,
                  "control: dropped {} malformed messages on " + endpoint,
                  "from " + peer + ": " + reason);
  }

  // One queued message: the valid one, or nullopt after dropping it.
  std::optional<IncomingMessage> take_one() {
    std::array<zmq::message_t, 2> frames;
    const size_t count = recv_message(router, frames);
    if (count == 0) return std::nullopt;
    zmq::message_t* payload = count >= 2 ? &frames[1] : nullptr;
    const std::string peer = describe_peer(frames[0], payload);
    if (count != 2) {
      drop(peer, "expected [identity, payload], got " + std::to_string(count) + " frames");
      return std::nullopt;
    }
    auto decoded = decode_envelope(bytes(frames[1]), limits);
    if (!decoded.ok()) {
      drop(peer, decoded.status().message());
      return std::nullopt;
    }
    // With CURVE the ZAP handler set the User-Id to the client's Z85 public key.
    std::string key;
    if (curve_enabled) {
      const char* user = zmq_msg_gets(frames[1].handle(), "User-Id");
      if (user != nullptr) key = user;
    }
    return IncomingMessage{frames[0].to_string(), std::move(decoded).value(), std::move(key)};
  }
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlServer::~ControlServer() {
  if (impl_ && impl_->drop_log) impl_->drop_log->flush();
}

Result<std::unique_ptr<ControlServer>> ControlServer::bind(const std::string& endpoint,
                                                           const CurveServerOptions& curve,
                                                           const MessageLimits& limits,
                                                           ControlLog log, int listen_fd) {
  if (listen_fd >= 0) {
    if (Status s = check_listen_socket(listen_fd, endpoint); !s.ok()) {
      ::close(listen_fd);  // taken whether or not it is served (zmq_channel.h)
      return s;
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->limits = limits;
  impl->curve_enabled = curve.enabled;
  impl->log = std::move(log);
  impl->drop_log = std::make_unique<RateLimitedLog>(impl->log);
  impl->endpoint = endpoint;
  if (curve.enabled) {
    if (!zmq_has("curve"))
      return failed_precondition("control: CURVE requested for " + endpoint +
                                 " but this libzmq was built without it");
    RETURN_IF_ERROR(check_key(curve.secret_z85, "the coordinator's secret key", endpoint));
    if (!curve.public_z85.empty())
      RETURN_IF_ERROR(check_key(curve.public_z85, "the coordinator's public key", endpoint));
    // The handler must be bound before the ROUTER: without one libzmq admits every key.
    ASSIGN_OR_RETURN(impl->zap,
                     ZapHandler::start(impl->context, curve.authorized_public_z85, impl->log));
  }
  try {
    impl->router = zmq::socket_t(impl->context, zmq::socket_type::router);
    impl->router.set(zmq::sockopt::linger, 0);
    impl->router.set(zmq::sockopt::router_mandatory, false);
    impl->router.set(zmq::sockopt::maxmsgsize, memory_guard(limits));
    if (curve.enabled) {
      impl->router.set(zmq::sockopt::curve_server, true);
      impl->router.set(zmq::sockopt::curve_secretkey, curve.secret_z85);
      if (!curve.public_z85.empty())
        impl->router.set(zmq::sockopt::curve_publickey, curve.public_z85);
      impl->router.set(zmq::sockopt::zap_domain, "weightcast");
    }
    // ZMQ_USE_FD: the listener adopts the socket (and closes it with the ROUTER).
    if (listen_fd >= 0) impl->router.set(zmq::sockopt::use_fd, listen_fd);
    impl->router.bind(endpoint);
    impl->endpoint = impl->router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return zmq_failure("cannot bind the control socket at", endpoint, e);
  }
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

const std::string& ControlServer::endpoint() const {
  return impl_->endpoint;
}

Result<std::optional<IncomingMessage>> ControlServer::receive(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  try {
    for (;;) {
      zmq::pollitem_t item{impl_->router.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, remaining(deadline));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
      if ((item.revents & ZMQ_POLLIN) != 0) {
        if (auto message = impl_->take_one()) return message;
      }
      if (Clock::now() >= deadline) return std::optional<IncomingMessage>();
    }
  } catch (const zmq::error_t& e) {
    return zmq_failure("cannot receive on", impl_->endpoint, e);
  }
}

Status ControlServer::send(const std::string& peer, const proto::Envelope& message) {
  ASSIGN_OR_RETURN(std::string payload,
                   encode_for_send(message, impl_->limits, "a peer of " + impl_->endpoint));
  try {
    // ROUTER_MANDATORY is off: an unknown or gone peer, or a full queue, drops silently.
    (void)impl_->router.send(zmq::buffer(peer), zmq::send_flags::sndmore);
    (void)impl_->router.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    return zmq_failure("cannot send a " + body_name(message) + " on", impl_->endpoint, e);
  }
  return ok_status();
}

uint64_t ControlServer::dropped() const {
  return impl_->dropped;
}

uint64_t ControlServer::refused_peers() const {
  return impl_->zap ? impl_->zap->refused() : 0;
}

// ----------------------------------------------------------------------------- client

struct ControlClient::Impl {
  zmq::context_t context;
  zmq::socket_t dealer;
  zmq::socket_t monitor;  // PAIR connected to the DEALER's handshake events
  std::string endpoint;
  bool curve = false;
  MessageLimits limits;
  ControlLog log;
  uint64_t dropped = 0;
  std::optional<std::string> auth_failure;

  ~Impl() {
    // Stop the monitor before closing either end so the context can terminate.
    if (dealer) zmq_socket_monitor(dealer.handle(), nullptr, 0);
    monitor.close();
    dealer.close();
  }

  // Reads every queued monitor event without waiting; the first handshake failure sticks.
  void drain_monitor() {
    std::array<zmq::message_t, 2> frames;
    while (size_t count = recv_message(monitor, frames)) {
      if (count < 1 || frames[0].size() < 6) continue;
      uint16_t event = 0;
      uint32_t value = 0;
      std::memcpy(&event, frames[0].data(), sizeof event);
      std::memcpy(&value, static_cast<const uint8_t*>(frames[0].data()) + 2, sizeof value);
      std::string reason;
      if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        reason = "coordinator " + endpoint + " refused this rank's CURVE key (status " +
                 std::to_string(value) + ")";
      } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        char code[16];
        std::snprintf(code, sizeof code, "0x%x", value);
        reason = "handshake with coordinator " + endpoint + " failed: protocol error " + code +
                 (curve ? " (does the coordinator use CURVE with this public key?)"
                        : " (does the coordinator require CURVE?)");
      } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && curve) {
        // A CURVE server that cannot decrypt our HELLO just closes the connection.
        reason = "coordinator " + endpoint +
                 " closed the connection during the CURVE handshake (wrong server public key?)";
      }
      if (reason.empty() || auth_failure) continue;
      auth_failure = reason;
      if (log) log("control: " + reason);
    }
  }

  std::optional<proto::Envelope> take_one() {
    std::array<zmq::message_t, 1> frames;
    const size_t count = recv_message(dealer, frames);
    if (count == 0) return std::nullopt;
    std::string reason;
    if (count != 1) {
      reason = "expected 1 frame, got " + std::to_string(count);
    } else {
      auto decoded = decode_envelope(bytes(frames[0]), limits);
      if (decoded.ok()) return std::move(decoded).value();
      reason = decoded.status().message();
    }
    ++dropped;
    if (log) log("control: dropped a message from coordinator " + endpoint + ": " + reason);
    return std::nullopt;
  }
};

ControlClient::ControlClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlClient::~ControlClient() = default;

Result<std::unique_ptr<ControlClient>> ControlClient::connect(const std::string& endpoint,
                                                              const CurveClientOptions& curve,
                                                              const MessageLimits& limits,
                                                              ControlLog log) {
  auto impl = std::make_unique<Impl>();
  impl->endpoint = endpoint;
  impl->curve = curve.enabled;
  impl->limits = limits;
  impl->log = std::move(log);
  if (curve.enabled) {
    if (!zmq_has("curve"))
      return failed_precondition("control: CURVE requested for " + endpoint +
                                 " but this libzmq was built without it");
    RETURN_IF_ERROR(check_key(curve.server_public_z85, "the coordinator's public key", endpoint));
    RETURN_IF_ERROR(check_key(curve.public_z85, "this rank's public key", endpoint));
    RETURN_IF_ERROR(check_key(curve.secret_z85, "this rank's secret key", endpoint));
  }
  try {
    impl->dealer = zmq::socket_t(impl->context, zmq::socket_type::dealer);
    // A closing rank's last messages (its Leave, a final Ack) get a bounded moment to leave.
    impl->dealer.set(zmq::sockopt::linger, 500);
    impl->dealer.set(zmq::sockopt::reconnect_ivl, kReconnectIvlMs);
    impl->dealer.set(zmq::sockopt::maxmsgsize, memory_guard(limits));
    if (curve.enabled) {
      impl->dealer.set(zmq::sockopt::curve_serverkey, curve.server_public_z85);
      impl->dealer.set(zmq::sockopt::curve_publickey, curve.public_z85);
      impl->dealer.set(zmq::sockopt::curve_secretkey, curve.secret_z85);
    }
    // The monitor is attached before connecting so the first handshake is observed.
    const int events = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(impl->dealer.handle(), kMonitorEndpoint, events) != 0)
      throw zmq::error_t();
    impl->monitor = zmq::socket_t(impl->context, zmq::socket_type::pair);
    impl->monitor.set(zmq::sockopt::linger, 0);
    impl->monitor.connect(kMonitorEndpoint);
    impl->dealer.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return zmq_failure("cannot connect to coordinator", endpoint, e);
  }
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
}

Status ControlClient::send(const proto::Envelope& message) {
  ASSIGN_OR_RETURN(std::string payload,
                   encode_for_send(message, impl_->limits, "coordinator " + impl_->endpoint));
  try {
    impl_->drain_monitor();
    if (!impl_->dealer.send(zmq::buffer(payload), zmq::send_flags::dontwait)) {
      return io_error("control: cannot queue a " + body_name(message) + " for coordinator " +
                      impl_->endpoint + ": send queue full (coordinator unreachable?)");
    }
  } catch (const zmq::error_t& e) {
    return zmq_failure("cannot send a " + body_name(message) + " to coordinator", impl_->endpoint,
                       e);
  }
  return ok_status();
}

Result<std::optional<proto::Envelope>> ControlClient::receive(milliseconds timeout, int wake_fd) {
  const auto deadline = Clock::now() + timeout;
  try {
    for (;;) {
      std::array<zmq::pollitem_t, 3> items{{{impl_->dealer.handle(), 0, ZMQ_POLLIN, 0},
                                            {impl_->monitor.handle(), 0, ZMQ_POLLIN, 0},
                                            {nullptr, wake_fd, ZMQ_POLLIN, 0}}};
      try {
        zmq::poll(items.data(), wake_fd >= 0 ? 3 : 2, remaining(deadline));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
      if ((items[1].revents & ZMQ_POLLIN) != 0) impl_->drain_monitor();
      if ((items[0].revents & ZMQ_POLLIN) != 0) {
        if (auto message = impl_->take_one()) return message;
      }
      if ((items[2].revents & ZMQ_POLLIN) != 0) return std::optional<proto::Envelope>();
      if (Clock::now() >= deadline) return std::optional<proto::Envelope>();
    }
  } catch (const zmq::error_t& e) {
    return zmq_failure("cannot receive from coordinator", impl_->endpoint, e);
  }
}

std::optional<std::string> ControlClient::auth_failure() const {
  try {
    impl_->drain_monitor();
  } catch (const zmq::error_t&) {
    // Reading events is best effort here; receive() reports socket errors.
  }
  return impl_->auth_failure;
}

uint64_t ControlClient::dropped() const {
  return impl_->dropped;
}

}  // namespace weightcast
