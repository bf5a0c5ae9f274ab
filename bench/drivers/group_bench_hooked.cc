#include "bench/drivers/group_bench_hooked.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "bench/drivers/group_bench_targets.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {
namespace {

using nlohmann::json;

// The step's files but MANIFEST, by name; false when the directory cannot be listed.
bool step_files(const std::string& dir, std::set<std::string>* names) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != "MANIFEST") names->insert(name);
  }
  return !ec;
}

bool same_bytes(const std::string& a, const std::string& b) {
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  if (!fa || !fb) return false;
  return std::equal(std::istreambuf_iterator<char>(fa), std::istreambuf_iterator<char>(),
                    std::istreambuf_iterator<char>(fb), std::istreambuf_iterator<char>());
}

}  // namespace

int same_delta_step(const std::string& journal_a, const std::string& journal_b, uint64_t version) {
  const std::string a = JournalLayout(journal_a).step(version),
                    b = JournalLayout(journal_b).step(version);
  std::error_code ec;
  if (!std::filesystem::is_directory(a, ec) || !std::filesystem::is_directory(b, ec)) return -1;
  std::set<std::string> names_a, names_b;
  if (!step_files(a, &names_a) || !step_files(b, &names_b)) return -1;
  if (names_a != names_b || names_a.empty()) return 0;
  for (const auto& name : names_a) {
    if (!same_bytes(a + "/" + name, b + "/" + name)) return 0;
  }
  return 1;
}

void compare_publisher_modes(const json& snapshot, json* hooked, const GroupBenchBounds& b) {
  std::map<uint64_t, const json*> snap;  // into `snapshot`, not into a copy
  const json none = json::array();
  for (const auto& v : snapshot.contains("versions") ? snapshot["versions"] : none) {
    snap[v.value("version", uint64_t{0})] = &v;
  }
  std::vector<double> write_ratios, publish_ratios;
  json compared = json::array(), differing = json::array();
  const std::string journal_s = snapshot.value("journal_root", "");
  const std::string journal_h = hooked->value("journal_root", "");
  for (const auto& v : (*hooked)["versions"]) {
    if (v.value("kind", "") != "delta") continue;
    const uint64_t version = v.value("version", uint64_t{0});
    if (v["write_ms"].is_number() && v["plain_copy_ms"].is_number() &&
        v["plain_copy_ms"].get<double>() > 0) {
      write_ratios.push_back(v["write_ms"].get<double>() / v["plain_copy_ms"].get<double>());
    }
    auto s = snap.find(version);
    if (s == snap.end() || s->second->value("kind", "") != "delta") continue;
    const json& sp = (*s->second)["publish_ms"];
    if (v["publish_ms"].is_number() && sp.is_number() && sp.get<double>() > 0) {
      publish_ratios.push_back(v["publish_ms"].get<double>() / sp.get<double>());
    }
    const int same = same_delta_step(journal_s, journal_h, version);
    if (same < 0) continue;
    compared.push_back(version);
    if (same == 0) differing.push_back(version);
  }
  const json write_median = write_ratios.empty() ? json() : json(bench_median(write_ratios));
  const json publish_median = publish_ratios.empty() ? json() : json(bench_median(publish_ratios));
  (*hooked)["modes"] = {{"compared_with", snapshot.value("label", "")},
                        {"write_vs_copy_median", write_median},
                        {"publish_vs_snapshot_median", publish_median},
                        {"compared_versions", compared},
                        {"differing_versions", differing}};
  json& targets = (*hooked)["targets"];
  json t =
      bench_target("hooked_write_vs_copy", write_median, b.slack * b.write_copy_factor, "ratio");
  if (write_median.is_null()) t["why"] = "the trainer reported no write pass of a delta version";
  targets.push_back(std::move(t));
  t = bench_target("hooked_publish_vs_snapshot", publish_median, b.slack * b.publish_factor,
                   "ratio");
  if (publish_median.is_null()) {
    t["why"] = "no version published as a delta by both runs with the trainer's publish time";
  }
  targets.push_back(std::move(t));
  t = bench_target("hooked_records_identical",
                   compared.empty() ? json() : json(static_cast<double>(differing.size())), 0,
                   "versions");
  if (compared.empty()) t["why"] = "neither journal still holds a delta step of the other";
  targets.push_back(std::move(t));
}

}  // namespace weightcast
