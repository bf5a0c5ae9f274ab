// ControlServer / ControlClient under attack: CURVE admission through the ZAP handler
// (authorized, unknown and plain clients, a wrong server key), and malformed or oversized
// frames from raw peers dropped and counted without disturbing anyone else.
// Every wait is bounded (a few seconds at most).
#include "src/control/zmq_channel.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "tests/control/zmq_test_util.h"

namespace weightcast::zmq_test {
namespace {

using namespace std::chrono_literals;

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
  size_t count(const std::string& part) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t n = 0;
    for (const std::string& line : lines_) n += line.find(part) != std::string::npos;
    return n;
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

// Lets `client` read its handshake events until it reports a failure or 10 s pass.
std::string wait_for_auth_failure(ControlClient& client) {
  const auto deadline = Clock::now() + 10s;  // a loaded machine (the sanitizer run) takes seconds
  while (!client.auth_failure() && Clock::now() < deadline) {
    EXPECT_TRUE(client.receive(50ms).ok());
  }
  return client.auth_failure().value_or("");
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

// Many unknown keys handshaking at once: the first few refusals are logged in full, the rest
// as one count (written when the server stops, the interval not being over yet).
TEST(ZmqChannel, CurveRefusalsAreRateLimitedAndCounted) {
  CurveSetup keys;
  LogLines logs;
  auto server = bind_server("tcp://127.0.0.1:*", keys.server_options(), {}, logs.sink());
  ASSERT_NE(server, nullptr);
  constexpr size_t kStrangers = 40;
  {
    zmq::context_t context;
    std::vector<zmq::socket_t> strangers;
    for (size_t i = 0; i < kStrangers; ++i) {
      const KeyPair k = make_keypair();
      zmq::socket_t& s = strangers.emplace_back(context, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::curve_serverkey, keys.server.public_z85);
      s.set(zmq::sockopt::curve_publickey, k.public_z85);
      s.set(zmq::sockopt::curve_secretkey, k.secret_z85);
      s.connect(server->endpoint());
    }
    const auto deadline = Clock::now() + 10s;
    while (server->refused_peers() < kStrangers && Clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
  }
  std::this_thread::sleep_for(200ms);  // any handshake still in flight is answered
  const uint64_t refused = server->refused_peers();
  ASSERT_GE(refused, kStrangers);
  EXPECT_EQ(logs.count("control: refused CURVE key "), 5u);
  server.reset();

  const std::vector<std::string> lines = logs.lines();
  EXPECT_EQ(lines.size(), 6u);
  EXPECT_EQ(logs.count("control: refused " + std::to_string(refused - 5) +
                       " connections from unauthenticated peers in the last "),
            1u)
      << (lines.empty() ? "" : lines.back());
  EXPECT_EQ(logs.count(" s (last: CURVE key "), 1u);
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

}  // namespace
}  // namespace weightcast::zmq_test
