// Shared helpers for the ControlServer / ControlClient tests (zmq_channel_test.cc and
// zmq_channel_security_test.cc): CURVE key pairs, Hello/Welcome envelopes, bind/connect
// wrappers that fail the test on error, and a bounded client -> server -> client round trip.
#pragma once

#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "src/control/zmq_channel.h"

namespace weightcast::zmq_test {

using Clock = std::chrono::steady_clock;

struct KeyPair {
  std::string public_z85;
  std::string secret_z85;
};

inline KeyPair make_keypair() {
  char pub[41] = {};
  char sec[41] = {};
  EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
  return {pub, sec};
}

inline proto::Envelope hello(uint32_t rank) {
  proto::Envelope m;
  m.set_protocol(kProtocolMax);
  m.set_rank(rank);
  m.mutable_hello()->set_rank(rank);
  m.mutable_hello()->set_protocol_min(kProtocolMin);
  m.mutable_hello()->set_protocol_max(kProtocolMax);
  m.mutable_hello()->add_transports("shm");
  return m;
}

inline proto::Envelope welcome() {
  proto::Envelope m;
  m.set_protocol(kProtocolMax);
  m.set_from_coordinator(true);
  m.mutable_welcome()->set_protocol(kProtocolMax);
  m.mutable_welcome()->set_plan("live");
  return m;
}

inline std::unique_ptr<ControlServer> bind_server(const std::string& endpoint,
                                                  const CurveServerOptions& curve = {},
                                                  const MessageLimits& limits = {},
                                                  ControlLog log = nullptr) {
  auto server = ControlServer::bind(endpoint, curve, limits, std::move(log));
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(server).value() : nullptr;
}

inline std::unique_ptr<ControlClient> connect_client(const std::string& endpoint,
                                                     const CurveClientOptions& curve = {},
                                                     ControlLog log = nullptr) {
  auto client = ControlClient::connect(endpoint, curve, {}, std::move(log));
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return client.ok() ? std::move(client).value() : nullptr;
}

// Client -> server (hello, with the sender's identity), then server -> that identity.
inline void expect_round_trip(ControlServer& server, ControlClient& client, uint32_t rank) {
  using namespace std::chrono_literals;
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

}  // namespace weightcast::zmq_test
