// A listening TCP socket the coordinator is handed instead of binding one itself:
// `weightcastd --listen-fd N` (systemd socket activation passes fd 3; a launcher or a test
// that binds the port once and keeps it open passes its own). Binding once and handing the
// socket over leaves no window in which another process can take the port, and a restarted
// coordinator serves the very socket its clients were already connecting to.
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"

namespace weightcast {

// OK when `fd` is an open TCP socket in the listening state whose port is the port of
// `endpoint` ("tcp://host:port"; "*" or 0 accepts any port). Errors name the fd, what it is
// instead (not open, not a socket, not listening, not TCP) and, on a port mismatch, both
// ports: the group's other ranks connect to the endpoint's port, not to the socket's.
Status check_listen_socket(int fd, const std::string& endpoint);

// A TCP socket listening on 127.0.0.1 at a port the kernel chose (close-on-exec), and that
// port: what a launcher or test binds once and hands to the coordinator. Errors say what the
// kernel refused.
struct LoopbackListener {
  int fd = -1;
  uint16_t port = 0;
};
Result<LoopbackListener> listen_on_loopback();

}  // namespace weightcast
