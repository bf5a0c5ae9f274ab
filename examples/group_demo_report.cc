#include "examples/group_demo_report.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "src/control/messages.h"

namespace weightcast::demo {
namespace {

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

nlohmann::json result_json(const proto::SubscriberResult& r) {
  return {{"rank", r.rank()},
          {"result", r.result()},
          {"transport", r.transport()},
          {"apply_ms", r.apply_us() / 1e3},
          {"bytes_read", r.bytes_read()},
          {"bytes_written", r.bytes_written()},
          {"peak_rss_bytes", r.peak_rss_bytes()},
          {"engine_bytes", r.engine_bytes()}};
}

}  // namespace

uint64_t process_vm_hwm_bytes(uint32_t pid) {
  if (pid == 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    uint64_t kib = 0;
    std::string unit;
    if (!(fields >> kib >> unit) || unit != "kB") return 0;
    return kib * 1024;
  }
  return 0;
}

nlohmann::json publisher_steps_json(const std::string& path) {
  nlohmann::json steps = nlohmann::json::array();
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto step = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (step.is_object()) steps.push_back(std::move(step));
  }
  return steps;
}

nlohmann::json ranks_json(const proto::StatusReply& status) {
  const std::string host = this_host();
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& m : status.members()) {
    const bool here = !host.empty() && m.host() == host;
    ranks.push_back({{"rank", m.rank()},
                     {"role", std::string(role_name(m.role()))},
                     {"state", m.state()},
                     {"pid", m.pid()},
                     {"host", m.host()},
                     {"vm_hwm_bytes", here ? process_vm_hwm_bytes(m.pid()) : 0}});
  }
  return ranks;
}

nlohmann::json versions_json(const std::map<uint64_t, proto::VersionStatus>& committed,
                             const proto::StatusReply& latest) {
  std::map<uint64_t, const proto::VersionStatus*> now;
  for (const auto& v : latest.versions()) now[v.version()] = &v;
  nlohmann::json versions = nlohmann::json::array();
  for (const auto& [version, at_commit] : committed) {
    auto it = now.find(version);
    const proto::VersionStatus& s = it == now.end() ? at_commit : *it->second;
    nlohmann::json results = nlohmann::json::array();
    for (const auto& r : s.results()) results.push_back(result_json(r));
    versions.push_back({{"version", version},
                        {"anchor", at_commit.anchor()},
                        {"stored_bytes", at_commit.stored_bytes()},
                        {"publish_to_commit_ms", at_commit.publish_to_commit_us() / 1e3},
                        {"publisher_peak_rss_bytes", s.publisher_peak_rss_bytes()},
                        {"publisher_model_bytes", s.publisher_model_bytes()},
                        {"results", results}});
  }
  return versions;
}

}  // namespace weightcast::demo
