#include "examples/group_demo_setup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "src/control/curve_keys.h"

namespace weightcast::demo {

Result<uint16_t> free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return io_error("socket() for a free port failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return io_error("cannot bind 127.0.0.1:0 to find a free port");
  }
  ::close(fd);
  return static_cast<uint16_t>(ntohs(addr.sin_port));
}

Result<DemoGroup> prepare_demo_group(const DemoArgs& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  DemoGroup g;
  g.journal_root = args.work_dir + "/journal";
  g.state_dir = args.work_dir + "/ranks";
  g.config_path = args.work_dir + "/group.yaml";
  fs::remove_all(g.journal_root, ec);
  fs::remove_all(g.state_dir, ec);
  fs::create_directories(args.work_dir + "/keys", ec);
  if (ec) return io_error("cannot create " + args.work_dir + "/keys: " + ec.message());
  g.subscriber_ranks = args.subscribers + (args.late_joiner ? 1 : 0);

  uint16_t port = args.port;
  if (port == 0) {
    ASSIGN_OR_RETURN(port, free_loopback_port());
  }
  // One key pair per rank and one for observers (weightcast group status, this driver).
  auto key = [&](const std::string& name) -> Result<CurveKeyPair> {
    const std::string path = args.work_dir + "/keys/" + name + ".key";
    if (fs::exists(path, ec)) return read_curve_key_file(path);
    ASSIGN_OR_RETURN(CurveKeyPair pair, generate_curve_key_pair());
    RETURN_IF_ERROR(write_curve_key_file(path, pair));
    return pair;
  };
  ASSIGN_OR_RETURN(CurveKeyPair coordinator, key("coordinator"));
  RETURN_IF_ERROR(key("observer").status());

  std::ofstream y(g.config_path, std::ios::trunc);
  y << "# Written by weightcast_group_demo; docs/CONFIG.md documents every field.\n"
    << "group_id: demo\n"
    << "coordinator:\n  endpoint: tcp://127.0.0.1:" << port << "\n"
    << "journal:\n  root: journal\n  anchor_every: " << args.anchor_every
    << "\n  retain_anchors: 2\n"
    << "transports: [fs]\n"
    << "max_in_flight: 2\n"
    << "timeouts: {heartbeat_ms: 200, dead_after_ms: 3000, ack_timeout_ms: 60000, "
       "lease_ttl_ms: 60000}\n"
    << "curve:\n  enabled: true\n  coordinator_public_key: \"" << coordinator.public_z85
    << "\"\n  coordinator_key_file: keys/coordinator.key\n"
    << "  observer_key_file: keys/observer.key\n"
    << "demo:\n  parameters: " << args.parameters << "\n  density: " << args.density
    << "\n  versions: " << args.versions << "\n  seed: 1\n"
    << "ranks:\n";
  const uint32_t last_rank = g.first_subscriber + g.subscriber_ranks - 1;
  for (uint32_t r = 0; r <= last_rank; ++r) {
    const std::string role = r == g.coordinator ? "coordinator"
                             : r == g.publisher ? "publisher"
                                                : "subscriber";
    ASSIGN_OR_RETURN(CurveKeyPair pair, key("rank" + std::to_string(r)));
    y << "  - {rank: " << r << ", role: " << role << ", host: 127.0.0.1, key_file: keys/rank" << r
      << ".key, public_key: \"" << pair.public_z85 << "\"}\n";
  }
  y.close();
  if (!y) return io_error("cannot write " + g.config_path);
  return g;
}

}  // namespace weightcast::demo
