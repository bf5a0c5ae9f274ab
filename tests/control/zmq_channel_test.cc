// ControlServer / ControlClient on loopback without CURVE admission: binding and endpoint
// reporting, round trips over tcp and ipc, routing replies to the right peer, timeouts, and
// clean destruction. CURVE and hostile frames are in zmq_channel_security_test.cc.
// Every wait is bounded (a few seconds at most).
#include "src/control/zmq_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/control/zmq_test_util.h"

namespace weightcast::zmq_test {
namespace {

using namespace std::chrono_literals;

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
}  // namespace weightcast::zmq_test
