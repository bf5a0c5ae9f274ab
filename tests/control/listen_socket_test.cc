// A coordinator handed a listening socket (weightcastd --listen-fd, listen_socket.h): the
// checks that refuse what is not one, naming the fd and what it is, and a ControlServer
// serving the socket it was handed (the port bound once, no window for another process),
// then a second server serving the same socket after the first is gone, as a restarted
// coordinator does.
#include "src/control/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/control/zmq_test_util.h"

namespace weightcast::zmq_test {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A TCP socket bound to 127.0.0.1 at a kernel-chosen port, listening when `listen` says.
struct LoopbackSocket {
  explicit LoopbackSocket(bool listen = true) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (listen) {
      EXPECT_EQ(::listen(fd, 16), 0);
    }
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
  }
  ~LoopbackSocket() {
    if (fd >= 0) ::close(fd);
  }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port); }
  int fd = -1;
  int port = 0;
};

TEST(ListenSocket, AListeningLoopbackSocketOnTheEndpointsPortIsAccepted) {
  LoopbackSocket s;
  EXPECT_TRUE(check_listen_socket(s.fd, s.endpoint()).ok());
  EXPECT_TRUE(check_listen_socket(s.fd, "tcp://127.0.0.1:*").ok());
  EXPECT_TRUE(check_listen_socket(s.fd, "tcp://*:" + std::to_string(s.port)).ok());
}

TEST(ListenSocket, WhatIsNotAListeningTcpSocketOnThatPortIsRefusedNamingTheFd) {
  LoopbackSocket s;
  auto wrong_port = check_listen_socket(s.fd, "tcp://127.0.0.1:" + std::to_string(s.port + 1));
  ASSERT_FALSE(wrong_port.ok());
  EXPECT_TRUE(contains(wrong_port.message(), "listens on port " + std::to_string(s.port)))
      << wrong_port.message();

  LoopbackSocket bound_only(/*listen=*/false);
  auto idle = check_listen_socket(bound_only.fd, bound_only.endpoint());
  ASSERT_FALSE(idle.ok());
  EXPECT_TRUE(contains(idle.message(), "not listening")) << idle.message();

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  auto pipe_end = check_listen_socket(pipe_fds[0], s.endpoint());
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  ASSERT_FALSE(pipe_end.ok());
  EXPECT_TRUE(contains(pipe_end.message(), "--listen-fd " + std::to_string(pipe_fds[0])))
      << pipe_end.message();
  EXPECT_TRUE(contains(pipe_end.message(), "not a socket")) << pipe_end.message();

  const int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  auto datagram = check_listen_socket(udp, s.endpoint());
  ::close(udp);
  ASSERT_FALSE(datagram.ok());
  EXPECT_TRUE(contains(datagram.message(), "not a TCP socket")) << datagram.message();

  auto closed = check_listen_socket(1000, s.endpoint());
  ASSERT_FALSE(closed.ok());
  EXPECT_TRUE(contains(closed.message(), "not open")) << closed.message();

  auto ipc = check_listen_socket(s.fd, "ipc:///tmp/x");
  ASSERT_FALSE(ipc.ok());
  EXPECT_TRUE(contains(ipc.message(), "ipc:///tmp/x")) << ipc.message();
}

TEST(ListenSocket, AServerServesTheSocketItIsHandedAndASecondServesItAfterTheFirst) {
  LoopbackSocket s;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("server " + std::to_string(round + 1));
    // The server owns (and closes) what it is handed; the test keeps its own for the next.
    const int handed = ::fcntl(s.fd, F_DUPFD_CLOEXEC, 0);
    auto server = ControlServer::bind(s.endpoint(), {}, {}, nullptr, handed);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    EXPECT_EQ((*server)->endpoint(), s.endpoint());
    auto client = connect_client(s.endpoint());
    ASSERT_NE(client, nullptr);
    expect_round_trip(**server, *client, 1);
  }
  // A server binding the port itself is refused while the socket is held open.
  auto taken = ControlServer::bind(s.endpoint(), {});
  EXPECT_FALSE(taken.ok());
}

TEST(ListenSocket, AServerRefusesASocketOnAnotherPortBeforeServingIt) {
  LoopbackSocket s;
  const int handed = ::fcntl(s.fd, F_DUPFD_CLOEXEC, 0);
  auto server =
      ControlServer::bind("tcp://127.0.0.1:" + std::to_string(s.port + 1), {}, {}, nullptr, handed);
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(contains(server.status().message(), "listens on port")) << server.status().message();
  EXPECT_EQ(::fcntl(handed, F_GETFD), -1) << "the refused socket was left open";
  EXPECT_NE(::fcntl(s.fd, F_GETFD), -1);  // the test's own is untouched
}

}  // namespace
}  // namespace weightcast::zmq_test
