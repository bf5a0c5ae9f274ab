#include "src/control/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace weightcast {
namespace {

std::string fd_name(int fd) {
  return "--listen-fd " + std::to_string(fd);
}

// The port of "tcp://host:port" (0 for "*"), or an error naming the endpoint.
Result<int> endpoint_port(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos || colon < 6) {
    return invalid_argument("a listening socket serves only a tcp:// endpoint, not '" + endpoint +
                            "'");
  }
  const std::string port = endpoint.substr(colon + 1);
  if (port == "*") return 0;
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value < 0 || value > 65535) {
    return invalid_argument("endpoint '" + endpoint + "' has no valid port");
  }
  return static_cast<int>(value);
}

}  // namespace

Status check_listen_socket(int fd, const std::string& endpoint) {
  if (fd < 0) return invalid_argument(fd_name(fd) + " is not a file descriptor");
  if (::fcntl(fd, F_GETFD) == -1) {
    return invalid_argument(fd_name(fd) + " is not open in this process");
  }
  int accepting = 0, domain = 0, type = 0;
  socklen_t len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return invalid_argument(fd_name(fd) + " is not a socket (" + std::strerror(errno) + ")");
  }
  len = sizeof(int);
  (void)::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
  if (type != SOCK_STREAM || (domain != AF_INET && domain != AF_INET6)) {
    return invalid_argument(fd_name(fd) + " is not a TCP socket");
  }
  len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || accepting == 0) {
    return invalid_argument(fd_name(fd) + " is a TCP socket that is not listening");
  }
  ASSIGN_OR_RETURN(const int want, endpoint_port(endpoint));
  sockaddr_storage addr{};
  len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return internal_error(fd_name(fd) + ": getsockname failed: " + std::strerror(errno));
  }
  const int port =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (want != 0 && port != want) {
    return invalid_argument(fd_name(fd) + " listens on port " + std::to_string(port) +
                            " but the coordinator's endpoint is '" + endpoint +
                            "': the other ranks would not reach it");
  }
  return ok_status();
}

Result<LoopbackListener> listen_on_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error(std::string("socket() for a loopback port: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return io_error("cannot listen on 127.0.0.1 at a free port: " + why);
  }
  return LoopbackListener{fd, ntohs(addr.sin_port)};
}

}  // namespace weightcast
