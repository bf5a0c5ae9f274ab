// ZAP 1.0 handler for CURVE servers (zmq_zap_handler.h).
#include "src/control/zmq_zap_handler.h"

#include <chrono>
#include <iterator>
#include <utility>
#include <vector>
#include <zmq_addon.hpp>

namespace weightcast {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
// Bounds how long destruction waits for the thread to notice the stop flag.
constexpr std::chrono::milliseconds kPollInterval{50};
constexpr size_t kCurveKeyBytes = 32;
constexpr const char* kRefusalKey = "refused-peer";
constexpr const char* kRefusalSummary =
    "control: refused {} connections from unauthenticated peers";

std::string frame_text(const zmq::message_t& frame) {
  return std::string(static_cast<const char*>(frame.data()), frame.size());
}

}  // namespace

Result<std::unique_ptr<ZapHandler>> ZapHandler::start(zmq::context_t& context,
                                                      std::set<std::string> authorized_z85,
                                                      ControlLog log, RateLimitOptions log_limit) {
  try {
    zmq::socket_t socket(context, zmq::socket_type::rep);
    socket.set(zmq::sockopt::linger, 0);
    socket.bind(kZapEndpoint);
    return std::unique_ptr<ZapHandler>(
        new ZapHandler(std::move(socket), std::move(authorized_z85), std::move(log), log_limit));
  } catch (const zmq::error_t& e) {
    return internal_error(std::string("control: cannot bind the ZAP handler at ") + kZapEndpoint +
                          ": " + e.what());
  }
}

ZapHandler::ZapHandler(zmq::socket_t socket, std::set<std::string> authorized_z85, ControlLog log,
                       RateLimitOptions log_limit)
    : socket_(std::move(socket)),
      authorized_(std::move(authorized_z85)),
      log_(std::move(log)),
      refusal_log_(log_, log_limit) {
  // The socket was created on this thread; starting the thread is the memory barrier that
  // lets it move there.
  thread_ = std::thread([this] { run(); });
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  refusal_log_.flush();
  socket_.close();
}

void ZapHandler::run() {
  while (!stop_.load()) {
    try {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kPollInterval);
      refusal_log_.poll();  // a burst of refusals that stopped is still reported
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait))
        continue;
      answer(request);
    } catch (const zmq::error_t& e) {
      // ETERM: the context is going away; anything else would repeat, so stop answering
      // (libzmq then fails pending handshakes rather than admitting them).
      if (log_ && e.num() != ETERM) log_(std::string("control: ZAP handler stopped: ") + e.what());
      return;
    }
  }
}

void ZapHandler::answer(std::vector<zmq::message_t>& request) {
  // Frames: version, request id, domain, address, identity, mechanism, credentials...
  const std::string request_id = request.size() > 1 ? frame_text(request[1]) : std::string();
  std::string address = request.size() > 3 ? frame_text(request[3]) : std::string();
  if (address.empty()) address = "a local (ipc) peer";
  const std::string mechanism = request.size() > 5 ? frame_text(request[5]) : std::string();

  std::string status = "400";
  std::string text;
  std::string user_id;
  if (request.size() < 6 || frame_text(request[0]) != "1.0") {
    text = "malformed ZAP request";
    refuse("control: refused a peer from " + address + ": malformed ZAP request",
           "a malformed ZAP request from " + address);
  } else if (mechanism != "CURVE" || request.size() != 7 || request[6].size() != kCurveKeyBytes) {
    text = "only CURVE is accepted";
    refuse("control: refused a " + mechanism + " peer from " + address + ": CURVE required",
           "a " + mechanism + " peer from " + address);
  } else {
    char z85[kCurveKeyBytes * 5 / 4 + 1] = {};
    zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), kCurveKeyBytes);
    if (authorized_.count(z85) != 0) {
      status = "200";
      text = "OK";
      user_id = z85;
    } else {
      text = "key not in the group config";
      refuse(std::string("control: refused CURVE key ") + z85 + " from " + address +
                 ": not in the group config",
             std::string("CURVE key ") + z85 + " from " + address);
    }
  }

  // A REP socket must answer every request, malformed or not, to stay usable.
  const std::string reply[] = {"1.0", request_id, status, text, user_id, ""};
  for (size_t i = 0; i < std::size(reply); ++i) {
    const auto more = i + 1 < std::size(reply) ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)socket_.send(zmq::buffer(reply[i]), more);
  }
}

void ZapHandler::refuse(const std::string& line, const std::string& detail) {
  refused_.fetch_add(1);
  refusal_log_.log(kRefusalKey, line, kRefusalSummary, detail);
}

}  // namespace weightcast
