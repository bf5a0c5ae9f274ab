#include "src/control/group_init.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "src/control/curve_keys.h"
#include "src/control/group_config.h"
#include "src/control/listen_socket.h"
#include "transport/user_file_writer.h"

namespace weightcast {

Result<uint16_t> free_loopback_port() {
  ASSIGN_OR_RETURN(const LoopbackListener listener, listen_on_loopback());
  ::close(listener.fd);
  return listener.port;
}

std::string tensor_parallel_refusal(uint32_t subscribers, uint32_t tensor_parallel,
                                    uint32_t whole_subscribers) {
  if (whole_subscribers > subscribers) {
    return std::to_string(whole_subscribers) + " whole-tensor subscribers of only " +
           std::to_string(subscribers) + " subscribers";
  }
  const uint32_t sliced = subscribers - whole_subscribers;
  if (tensor_parallel <= 1 || sliced % tensor_parallel == 0) return "";
  return std::to_string(sliced) + " subscribers are not whole replicas of tensor parallel size " +
         std::to_string(tensor_parallel);
}

Result<GroupInitResult> init_group(const GroupInitOptions& o) {
  namespace fs = std::filesystem;
  if (o.dir.empty()) return invalid_argument("group init: no directory given");
  if (o.publishers == 0) return invalid_argument("group init: a group needs a publisher");
  if (const std::string why =
          tensor_parallel_refusal(o.subscribers, o.tensor_parallel, o.whole_subscribers);
      !why.empty()) {
    return invalid_argument("group init: " + why);
  }
  const uint64_t max_ranks = GroupConfigLimits{}.max_ranks;
  if (uint64_t{1} + o.publishers + o.subscribers > max_ranks) {
    return invalid_argument("group init: 1 coordinator + " + std::to_string(o.publishers) +
                            " publishers + " + std::to_string(o.subscribers) +
                            " subscribers exceed GroupConfigLimits::max_ranks (" +
                            std::to_string(max_ranks) + ")");
  }
  GroupInitResult out;
  out.config_path = o.dir + "/group.yaml";
  out.journal_root = o.dir + "/journal";
  std::error_code ec;
  if (!o.overwrite && fs::exists(out.config_path, ec)) {
    return failed_precondition(out.config_path + " exists (overwrite it with --force)");
  }
  fs::create_directories(o.dir + "/keys", ec);
  if (ec) return io_error("cannot create " + o.dir + "/keys: " + ec.message());
  std::string endpoint = o.endpoint;
  if (endpoint.empty()) {
    ASSIGN_OR_RETURN(uint16_t port, free_loopback_port());
    endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  }
  // One key pair per rank and one for observers; an existing key file is kept.
  auto key = [&](const std::string& name) -> Result<CurveKeyPair> {
    const std::string path = o.dir + "/keys/" + name + ".key";
    if (fs::exists(path, ec)) return read_curve_key_file(path);
    ASSIGN_OR_RETURN(CurveKeyPair pair, generate_curve_key_pair());
    RETURN_IF_ERROR(write_curve_key_file(path, pair));
    return pair;
  };

  std::string transport_list;
  for (const auto& t : o.transports) transport_list += (transport_list.empty() ? "" : ", ") + t;
  if (transport_list.empty()) return invalid_argument("group init: no transport given");
  std::ostringstream y;
  y << "# A weightcast rank group (docs/CONFIG.md documents every field). Start each rank with\n"
    << "#   weightcastd --config group.yaml --rank R\n"
    << "# or all of them on this machine with deploy/local/weightcast-local up --config "
       "group.yaml\n"
    << "group_id: " << o.group_id << "\n"
    << "coordinator:\n  endpoint: \"" << endpoint << "\"\n"
    << "journal:\n  root: journal\n  anchor_every: " << o.anchor_every << "\n  retain_anchors: 2\n"
    << "transports: [" << transport_list << "]\n"
    << "max_in_flight: " << o.max_in_flight << "\n"
    << "timeouts: {heartbeat_ms: " << o.heartbeat_ms << ", dead_after_ms: " << o.dead_after_ms
    << ", ack_timeout_ms: " << o.ack_timeout_ms << ", lease_ttl_ms: " << o.lease_ttl_ms << "}\n";
  if (!o.ucx_tls.empty() || !o.ucx_publisher_memory.empty()) y << "ucx:\n";
  if (!o.ucx_tls.empty()) y << "  tls: \"" << o.ucx_tls << "\"\n";
  if (!o.ucx_publisher_memory.empty())
    y << "  publisher_memory: " << o.ucx_publisher_memory << "\n";
  const uint32_t ranks = 1 + o.publishers + o.subscribers;
  std::vector<CurveKeyPair> pairs;
  if (o.curve) {
    for (uint32_t r = 0; r < ranks; ++r) {
      ASSIGN_OR_RETURN(CurveKeyPair pair, key("rank" + std::to_string(r)));
      pairs.push_back(std::move(pair));
    }
    RETURN_IF_ERROR(key("observer").status());
    y << "curve:\n  enabled: true\n  coordinator_public_key: \"" << pairs[0].public_z85
      << "\"\n  coordinator_key_file: keys/rank0.key\n  observer_key_file: keys/observer.key\n";
  }
  if (o.fp8) y << "fp8: {}\n";
  const uint32_t tp = std::max<uint32_t>(1, o.tensor_parallel);
  if (tp > 1) {
    y << "layouts:\n  - name: tp" << tp << "\n    parts: " << tp << "\n    rules:\n";
    for (const auto& rule : kTensorParallelRules) {
      y << "      - {match: '" << rule.match << "', dim: " << rule.dim << "}\n";
    }
  }
  if (o.demo_parameters > 0) {
    y << "demo:\n  parameters: " << o.demo_parameters << "\n  density: " << o.demo_density
      << "\n  versions: " << o.demo_versions << "\n  seed: 1\n";
    if (!o.demo_publisher_mode.empty()) {
      y << "  publisher_mode: " << o.demo_publisher_mode << "\n";
    }
    if (!o.demo_figures_path.empty()) y << "  figures_path: \"" << o.demo_figures_path << "\"\n";
    if (o.demo_step_interval_ms > 0) {
      y << "  step_interval_ms: " << o.demo_step_interval_ms << "\n";
    }
  }
  y << "ranks:\n";
  for (uint32_t r = 0; r < ranks; ++r) {
    const char* role = r == 0 ? "coordinator" : r <= o.publishers ? "publisher" : "subscriber";
    y << "  - {rank: " << r << ", role: " << role << ", host: 127.0.0.1";
    if (tp > 1 && r > o.publishers && r <= o.publishers + o.subscribers - o.whole_subscribers) {
      const uint32_t k = r - o.publishers - 1;  // among the subscribers
      y << ", layout: tp" << tp << ", part: " << k % tp << ", replica: engine" << k / tp;
    }
    if (o.curve) {
      y << ", key_file: keys/rank" << r << ".key, public_key: \"" << pairs[r].public_z85 << "\"";
    }
    y << "}\n";
  }
  // Checked by the real parser before it replaces group.yaml, which is then replaced
  // atomically (UserFileWriter: a symlinked group.yaml is written at its target, its mode
  // kept; a FIFO or read-only file there is refused).
  const std::string text = y.str();
  fs::path abs_dir = fs::absolute(o.dir, ec);
  if (ec) abs_dir = o.dir;
  auto check = parse_group_config(text, out.config_path, abs_dir.string());
  if (!check.ok()) {
    return internal_error("group init produced a config its loader refuses: " +
                          check.status().message());
  }
  RETURN_IF_ERROR(write_user_file(
      out.config_path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, {}));
  return out;
}

}  // namespace weightcast
