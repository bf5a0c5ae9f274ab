// ControlServer / ControlClient on loopback: round trips over tcp and ipc, CURVE admission
// through the ZAP handler, malformed frames dropped and counted, and clean destruction.
// Every wait is bounded (a few seconds at most).
#include "src/control/zmq_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace weightcast {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct KeyPair {
  std::string public_z85;
  std::string secret_z85;
};

KeyPair make_keypair() {
  char pub[41] = {};
  char sec[41] = {};
  EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
  return {pub, sec};
}

// Thread-safe: the ZAP handler logs from its own thread.
class LogLines {
 public:
  ControlLog sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.push_back(line);
    };
  }
  bool contains(const std::string& part) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& line : lines_) {
      if (line.find(part) != std::string::npos) return true;
    }
    return false;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

proto::Envelope hello(uint32_t rank) {
  proto::Envelope m;
  m.set_protocol(kProtocolMax);
  m.set_rank(rank);
  m.mutable_hello()->set_rank(rank);
  m.mutable_hello()->set_protocol_min(kProtocolMin);
  m.mutable_hello()->set_protocol_max(kProtocolMax);
  m.mutable_hello()->add_transports("shm");
  return m;
}

proto::Envelope welcome() {
  proto::Envelope m;
  m.set_protocol(kProtocolMax);
  m.set_from_coordinator(true);
  m.mutable_welcome()->set_protocol(kProtocolMax);
  m.mutable_welcome()->set_plan("live");
  return m;
}

std::unique_ptr<ControlServer> bind_server(const std::string& endpoint,
                                           const CurveServerOptions& curve = {},
                                           const MessageLimits& limits = {},
                                           ControlLog log = nullptr) {
  auto server = ControlServer::bind(endpoint, curve, limits, std::move(log));
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(server).value() : nullptr;
}

std::unique_ptr<ControlClient> connect_client(const std::string& endpoint,
                                              const CurveClientOptions& curve = {},
                                              ControlLog log = nullptr) {
  auto client = ControlClient::connect(endpoint, curve, {}, std::move(log));
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return client.ok() ? std::move(client).value() : nullptr;
}

// Client -> server (hello, with the sender's identity), then server -> that identity.
void expect_round_trip(ControlServer& server, ControlClient& client, uint32_t rank) {
  ASSERT_TRUE(client.send(hello(rank)).ok());
  auto incoming = server.receive(3s);
  ASSERT_TRUE(incoming.ok()) << incoming.status().to_string();
  ASSERT_TRUE(incoming->has_value()) << "server received nothing";
  const IncomingMessage& in = **incoming;
  EXPECT_FALSE(in.peer.empty());
  ASSERT_TRUE(in.message.has_hello());
  EXPECT_EQ(in.message.hello().rank(), rank);

  ASSERT_TRUE(server.send(in.peer, welcome()).ok());
  auto reply = client.receive(3s);
  ASSERT_TRUE(reply.ok()) << reply.status().to_string();
  ASSERT_TRUE(reply->has_value()) << "client received nothing";
  EXPECT_TRUE((*reply)->has_welcome());
  EXPECT_EQ((*reply)->welcome().plan(), "live");
}

// Lets `client` read its handshake events until it reports a failure or 3 s pass.
std::string wait_for_auth_failure(ControlClient& client) {
  const auto deadline = Clock::now() + 3s;
  while (!client.auth_failure() && Clock::now() < deadline) {
    EXPECT_TRUE(client.receive(50ms).ok());
  }
  return client.auth_failure().value_or("");
}

struct CurveSetup {
  KeyPair server = make_keypair();
  KeyPair member = make_keypair();
  CurveServerOptions server_options() const {
    return {true, server.public_z85, server.secret_z85, {member.public_z85}};
  }
  CurveClientOptions client_options(const KeyPair& keys) const {
    return {true, server.public_z85, keys.public_z85, keys.secret_z85};
  }
};

TEST(ZmqChannel, BindAnyTcpPortReportsTheRealEndpoint) {
  auto server = bind_server("tcp://127.0.0.1:*");
  ASSERT_NE(server, nullptr);
  const std::string& ep = server->endpoint();
  EXPECT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0u) << ep;
  EXPECT_EQ(ep.find('*'), std::string::npos) << ep;
  EXPECT_GT(std::atoi(ep.substr(ep.rfind(':') + 1).c_str()), 0) << ep;
}

TEST(ZmqChannel, BindErrorsNameTheEndpoint) {
  auto bad = ControlServer::bind("tcp://127.0.0.1:notaport", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tcp://127.0.0.1:notaport"), std::string::npos)
      << bad.status().message();

  CurveServerOptions curve{true, "short", "short", {}};
  auto bad_key = ControlServer::bind("tcp://127.0.0.1:*", curve);
  ASSERT_FALSE(bad_key.ok());
  EXPECT_EQ(bad_key.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_key.status().message().find("Z85"), std::string::npos);
}

TEST(ZmqChannel, RoundTripOverTcpWithoutCurve) {
  auto server = bind_server("tcp://127.0.0.1:*");
  ASSERT_NE(server, nullptr);
  auto client = connect_client(server->endpoint());
  ASSERT_NE(client, nullptr);
  expect_round_trip(*server, *client, 3);
  expect_round_trip(*server, *client, 3);  // the identity stays valid
  EXPECT_EQ(server->dropped(), 0u);
  EXPECT_EQ(client->dropped(), 0u);
  EXPECT_FALSE(client->auth_failure().has_value());
}

TEST(ZmqChannel, RoundTripOverIpc) {
  char dir_template[] = "/tmp/weightcast-zmq-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir = dir_template;
  {
    auto server = bind_server("ipc://" + (dir / "control.sock").string());
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(server->endpoint(), "ipc://" + (dir / "control.sock").string());
    auto client = connect_client(server->endpoint());
    ASSERT_NE(client, nullptr);
    expect_round_trip(*server, *client, 5);
  }
  std::filesystem::remove_all(dir);
}

TEST(ZmqChannel, RepliesReachTheRightClient) {
  auto server = bind_server("tcp://127.0.0.1:*");
  ASSERT_NE(server, nullptr);
  auto a = connect_client(server->endpoint());
  auto b = connect_client(server->endpoint());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->send(hello(1)).ok());
  ASSERT_TRUE(b->send(hello(2)).ok());
  std::string peer_of_b;
  for (int i = 0; i < 2; ++i) {
    auto in = server->receive(3s);
    ASSERT_TRUE(in.ok() && in->has_value());
    if ((*in)->message.hello().rank() == 2) peer_of_b = (*in)->peer;
  }
  ASSERT_FALSE(peer_of_b.empty());
  ASSERT_TRUE(server->send(peer_of_b, welcome()).ok());
  auto to_b = b->receive(3s);
  ASSERT_TRUE(to_b.ok() && to_b->has_value());
  auto to_a = a->receive(200ms);
  ASSERT_TRUE(to_a.ok());
  EXPECT_FALSE(to_a->has_value());
  // An unknown peer is dropped by the ROUTER, not an error.
  EXPECT_TRUE(server->send("no such peer", welcome()).ok());
}

TEST(ZmqChannel, ReceiveTimesOutWithNothing) {
  auto server = bind_server("tcp://127.0.0.1:*");
  ASSERT_NE(server, nullptr);
  const auto start = Clock::now();
  auto in = server->receive(100ms);
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->has_value());
  EXPECT_GE(Clock::now() - start, 90ms);
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(ZmqChannel, SendRefusesAnEnvelopeWithoutBody) {
  auto server = bind_server("tcp://127.0.0.1:*");
  ASSERT_NE(server, nullptr);
  auto client = connect_client(server->endpoint());
  ASSERT_NE(client, nullptr);
  proto::Envelope empty;
  empty.set_protocol(1);
  EXPECT_EQ(client->send(empty).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server->send("peer", empty).code(), StatusCode::kInvalidArgument);
}

TEST(ZmqChannel, CurveAuthorizedClientRoundTrip) {
  CurveSetup keys;
  LogLines logs;
  auto server = bind_server("tcp://127.0.0.1:*", keys.server_options(), {}, logs.sink());
  ASSERT_NE(server, nullptr);
  auto client = connect_client(server->endpoint(), keys.client_options(keys.member));
  ASSERT_NE(client, nullptr);
  expect_round_trip(*server, *client, 4);
  EXPECT_EQ(server->refused_peers(), 0u);
  EXPECT_FALSE(client->auth_failure().has_value());
}

TEST(ZmqChannel, CurveUnknownKeyIsRefused) {
  CurveSetup keys;
  LogLines server_logs;
  auto server = bind_server("tcp://127.0.0.1:*", keys.server_options(), {}, server_logs.sink());
  ASSERT_NE(server, nullptr);
  const KeyPair stranger = make_keypair();
  auto client = connect_client(server->endpoint(), keys.client_options(stranger));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->send(hello(9)).ok());

  const auto deadline = Clock::now() + 5s;
  while (!client->auth_failure() && Clock::now() < deadline) {
    auto in = server->receive(20ms);
    ASSERT_TRUE(in.ok());
    EXPECT_FALSE(in->has_value()) << "a refused client's message reached receive()";
    ASSERT_TRUE(client->receive(20ms).ok());
  }
  ASSERT_TRUE(client->auth_failure().has_value()) << "no auth failure within 5 s";
  EXPECT_EQ(*client->auth_failure(),
            "coordinator " + server->endpoint() + " refused this rank's CURVE key (status 400)");
  auto in = server->receive(300ms);
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->has_value());
  EXPECT_EQ(server->refused_peers(), 1u);
  EXPECT_TRUE(server_logs.contains("control: refused CURVE key " + stranger.public_z85 +
                                   " from 127.0.0.1: not in the group config"));
}

TEST(ZmqChannel, CurveWrongServerKeyDoesNotGetThrough) {
  CurveSetup keys;
  auto server = bind_server("tcp://127.0.0.1:*", keys.server_options());
  ASSERT_NE(server, nullptr);
  CurveClientOptions wrong = keys.client_options(keys.member);
  wrong.server_public_z85 = make_keypair().public_z85;
  auto client = connect_client(server->endpoint(), wrong);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->send(hello(4)).ok());
  auto in = server->receive(1s);
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->has_value());
  EXPECT_EQ(wait_for_auth_failure(*client),
            "coordinator " + server->endpoint() +
                " closed the connection during the CURVE handshake (wrong server public key?)");

  // The server still serves a correctly configured member.
  auto good = connect_client(server->endpoint(), keys.client_options(keys.member));
  ASSERT_NE(good, nullptr);
  expect_round_trip(*server, *good, 5);
}

TEST(ZmqChannel, PlainClientCannotReachCurveServer) {
  CurveSetup keys;
  auto server = bind_server("tcp://127.0.0.1:*", keys.server_options());
  ASSERT_NE(server, nullptr);
  auto client = connect_client(server->endpoint());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->send(hello(4)).ok());
  auto in = server->receive(500ms);
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->has_value());
  EXPECT_NE(wait_for_auth_failure(*client).find("(does the coordinator require CURVE?)"),
            std::string::npos);
}

// A peer that writes raw ZeroMQ frames rather than going through ControlClient.
struct RawDealer {
  zmq::context_t context;
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  explicit RawDealer(const std::string& endpoint) {
    socket.set(zmq::sockopt::linger, 0);
    socket.connect(endpoint);
  }
  void send(const std::string& frame, bool more = false) {
    ASSERT_TRUE(
        socket.send(zmq::buffer(frame), more ? zmq::send_flags::sndmore : zmq::send_flags::none));
  }
};

TEST(ZmqChannel, ServerDropsMalformedFramesAndKeepsReceiving) {
  MessageLimits limits;
  limits.max_bytes = 1024;
  LogLines logs;
  auto server = bind_server("tcp://127.0.0.1:*", {}, limits, logs.sink());
  ASSERT_NE(server, nullptr);
  RawDealer raw(server->endpoint());
  raw.send(std::string("\x0f\xff garbage \x13\x37", 12));
  const std::string valid = encode_envelope(hello(7));
  raw.send(valid.substr(0, valid.size() - 2));                    // truncated
  raw.send(std::string(1500, 'x'));                               // over max_bytes
  raw.send(valid, true), raw.send(valid, true), raw.send(valid);  // 3 frames
  raw.send(valid);

  auto in = server->receive(3s);
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  ASSERT_TRUE(in->has_value());
  EXPECT_EQ((*in)->message.hello().rank(), 7u);
  EXPECT_EQ(server->dropped(), 4u);
  EXPECT_TRUE(logs.contains("is not a valid Envelope"));
  EXPECT_TRUE(logs.contains("frame of 1500 bytes, limit 1024"));
  EXPECT_TRUE(logs.contains("expected [identity, payload], got 4 frames"));
  EXPECT_TRUE(logs.contains("(127.0.0.1)"));
}

TEST(ZmqChannel, FrameOverTheMemoryGuardCostsOnlyThatPeer) {
  MessageLimits limits;
  limits.max_bytes = 1024;
  auto server = bind_server("tcp://127.0.0.1:*", {}, limits);
  ASSERT_NE(server, nullptr);
  RawDealer raw(server->endpoint());
  raw.send(std::string(4096, 'x'));  // libzmq disconnects this peer before buffering it
  auto client = connect_client(server->endpoint());
  ASSERT_NE(client, nullptr);
  expect_round_trip(*server, *client, 2);
}

TEST(ZmqChannel, ClientDropsMalformedFramesAndKeepsReceiving) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  LogLines logs;
  auto client = connect_client(endpoint, {}, logs.sink());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->send(hello(1)).ok());
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, 3s), 1);
  zmq::message_t identity, payload;
  ASSERT_TRUE(router.recv(identity));
  ASSERT_TRUE(router.recv(payload));

  const std::string valid = encode_envelope(welcome());
  const auto to_client = [&](const std::vector<std::string>& frames) {
    (void)router.send(zmq::buffer(identity.to_string()), zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i) {
      (void)router.send(zmq::buffer(frames[i]),
                        i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  to_client({"\x0f garbage"});
  to_client({valid, valid});
  to_client({""});
  to_client({valid});
  auto in = client->receive(3s);
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  ASSERT_TRUE(in->has_value());
  EXPECT_TRUE((*in)->has_welcome());
  EXPECT_EQ(client->dropped(), 3u);
  EXPECT_TRUE(logs.contains("control: dropped a message from coordinator " + endpoint));
  EXPECT_TRUE(logs.contains("expected 1 frame, got 2"));
  EXPECT_TRUE(logs.contains("empty frame"));
}

TEST(ZmqChannel, DestructionWithConnectedClientDoesNotHang) {
  for (const bool curve : {false, true}) {
    SCOPED_TRACE(curve ? "curve" : "plain");
    CurveSetup keys;
    auto server =
        bind_server("tcp://127.0.0.1:*", curve ? keys.server_options() : CurveServerOptions{});
    ASSERT_NE(server, nullptr);
    auto client = connect_client(server->endpoint(),
                                 curve ? keys.client_options(keys.member) : CurveClientOptions{});
    ASSERT_NE(client, nullptr);
    expect_round_trip(*server, *client, 1);
    ASSERT_TRUE(client->send(hello(1)).ok());  // left unread
    auto start = Clock::now();
    server.reset();
    EXPECT_LT(Clock::now() - start, 2s);
    auto in = client->receive(100ms);  // the coordinator is gone: just a timeout
    ASSERT_TRUE(in.ok());
    EXPECT_FALSE(in->has_value());
    start = Clock::now();
    client.reset();
    EXPECT_LT(Clock::now() - start, 2s);
  }
}

TEST(ZmqChannel, AbsentCoordinatorIsOnlyATimeout) {
  auto client = connect_client("tcp://127.0.0.1:1");
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->send(hello(1)).ok());
  auto in = client->receive(200ms);
  ASSERT_TRUE(in.ok());
  EXPECT_FALSE(in->has_value());
  EXPECT_FALSE(client->auth_failure().has_value());
}

}  // namespace
}  // namespace weightcast
