#include "src/control/group_status.h"

#include <cstdio>

#include "src/control/group_config.h"
#include "src/control/group_security.h"
#include "src/control/messages.h"
#include "src/control/zmq_channel.h"

namespace weightcast {

Result<proto::StatusReply> query_group_status(const proto::GroupConfig& config,
                                              const std::string& key_file,
                                              std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(CurveClientOptions curve, observer_curve(config, key_file));
  ASSIGN_OR_RETURN(std::unique_ptr<ControlClient> client,
                   ControlClient::connect(config.coordinator_endpoint(), curve));
  proto::Envelope request;
  request.set_protocol(kProtocolMax);
  request.mutable_status_request();
  RETURN_IF_ERROR(client->send(request));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    ASSIGN_OR_RETURN(auto reply, client->receive(std::chrono::milliseconds(50)));
    if (auto failure = client->auth_failure()) return failed_precondition(*failure);
    if (!reply) continue;
    if (reply->has_status_reply()) return reply->status_reply();
    if (reply->has_refuse()) {
      return failed_precondition("coordinator " + config.coordinator_endpoint() +
                                 " refused the status request: " + reply->refuse().reason());
    }
  }
  return deadline_exceeded("no answer from the coordinator at " + config.coordinator_endpoint() +
                           " within " + std::to_string(timeout.count()) +
                           " ms (is it running? is the observer key authorized?)");
}

nlohmann::json status_to_json(const proto::StatusReply& s) {
  nlohmann::json j;
  j["group_id"] = s.group_id();
  j["protocol"] = s.protocol();
  j["head_version"] = s.has_head() ? nlohmann::json(s.head_version()) : nlohmann::json();
  j["committed_version"] =
      s.has_committed() ? nlohmann::json(s.committed_version()) : nlohmann::json();
  j["anchor_version"] = s.has_anchor() ? nlohmann::json(s.anchor_version()) : nlohmann::json();
  j["versions_in_flight"] = s.versions_in_flight();
  j["nccl"] =
      s.nccl_epoch() == 0
          ? nlohmann::json()
          : nlohmann::json{
                {"epoch", s.nccl_epoch()},
                {"ready", s.nccl_ready()},
                {"ranks", std::vector<uint32_t>(s.nccl_ranks().begin(), s.nccl_ranks().end())}};
  j["replicas"] = nlohmann::json::array();
  for (const auto& r : s.replicas()) {
    j["replicas"].push_back(
        {{"layout", r.layout()},
         {"replica", r.replica()},
         {"ranks", std::vector<uint32_t>(r.ranks().begin(), r.ranks().end())},
         {"committed_version",
          r.has_committed() ? nlohmann::json(r.committed_version()) : nlohmann::json()}});
  }
  j["members"] = nlohmann::json::array();
  for (const auto& m : s.members()) {
    j["members"].push_back(
        {{"rank", m.rank()},
         {"role", std::string(role_name(m.role()))},
         {"state", m.state()},
         {"version", m.holds_version() ? nlohmann::json(m.held_version()) : nlohmann::json()},
         {"transport", m.transport()},
         {"lag", m.lag()},
         {"last_heartbeat_ms_ago", m.last_heartbeat_ms_ago()},
         {"host", m.host()},
         {"pid", m.pid()}});
  }
  j["versions"] = nlohmann::json::array();
  for (const auto& v : s.versions()) {
    nlohmann::json results = nlohmann::json::object();
    nlohmann::json subscribers = nlohmann::json::array();
    for (const auto& r : v.results()) {
      results[std::to_string(r.rank())] = r.result();
      subscribers.push_back({{"rank", r.rank()},
                             {"result", r.result()},
                             {"transport", r.transport()},
                             {"apply_us", r.apply_us()},
                             {"bytes_read", r.bytes_read()},
                             {"bytes_written", r.bytes_written()},
                             {"peak_rss_bytes", r.peak_rss_bytes()},
                             {"engine_bytes", r.engine_bytes()},
                             {"after_commit", r.after_commit()}});
    }
    j["versions"].push_back({{"version", v.version()},
                             {"anchor", v.anchor()},
                             {"stored_bytes", v.stored_bytes()},
                             {"committed", v.committed()},
                             {"publish_to_commit_us", v.publish_to_commit_us()},
                             {"publisher_peak_rss_bytes", v.publisher_peak_rss_bytes()},
                             {"publisher_model_bytes", v.publisher_model_bytes()},
                             {"results", results},
                             {"subscribers", subscribers}});
  }
  return j;
}

std::string format_status(const proto::StatusReply& s) {
  const auto opt = [](bool has, uint64_t v) { return has ? std::to_string(v) : std::string("-"); };
  std::string out = "group " + s.group_id() + ": head " + opt(s.has_head(), s.head_version()) +
                    ", committed " + opt(s.has_committed(), s.committed_version()) +
                    ", latest anchor " + opt(s.has_anchor(), s.anchor_version()) + ", " +
                    std::to_string(s.versions_in_flight()) + " in flight\n";
  if (s.nccl_epoch() != 0) {
    std::string ranks;
    for (uint32_t r : s.nccl_ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    out += "nccl epoch " + std::to_string(s.nccl_epoch()) +
           (s.nccl_ready() ? " (ready)" : " (forming)") + ": ranks " + ranks + "\n";
  }
  char line[256];
  std::snprintf(line, sizeof(line), "%5s  %-11s  %-8s  %8s  %-9s  %4s  %14s  %s\n", "rank", "role",
                "state", "version", "transport", "lag", "heartbeat (ms)", "host/pid");
  out += line;
  for (const auto& m : s.members()) {
    std::snprintf(line, sizeof(line), "%5u  %-11s  %-8s  %8s  %-9s  %4llu  %14lld  %s/%u\n",
                  m.rank(), std::string(role_name(m.role())).c_str(), m.state().c_str(),
                  opt(m.holds_version(), m.held_version()).c_str(), m.transport().c_str(),
                  static_cast<unsigned long long>(m.lag()),
                  static_cast<long long>(m.last_heartbeat_ms_ago()), m.host().c_str(), m.pid());
    out += line;
  }
  for (const auto& r : s.replicas()) {
    std::string ranks;
    for (uint32_t k : r.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(k);
    out += "replica " + r.replica() + " of layout " + r.layout() + " (ranks " + ranks +
           "): committed " + opt(r.has_committed(), r.committed_version()) + "\n";
  }
  return out;
}

}  // namespace weightcast
