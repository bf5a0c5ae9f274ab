#include "src/group_bench_hooked.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

namespace weightcast {
namespace {

using nlohmann::json;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// A step's directory (transport/fs/journal_layout.h: v plus 20 digits).
std::string step_dir(const std::string& journal, uint64_t version) {
  char name[32];
  std::snprintf(name, sizeof name, "v%020llu", static_cast<unsigned long long>(version));
  return journal + "/" + name;
}

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

json target(const char* name, json measured, double bound, const char* unit) {
  json t{{"target", name}, {"measured", measured}, {"bound", bound}, {"unit", unit}};
  t["pass"] = measured.is_null() ? json() : json(measured.get<double>() <= bound);
  return t;
}

}  // namespace

int same_delta_step(const std::string& journal_a, const std::string& journal_b, uint64_t version) {
  const std::string a = step_dir(journal_a, version), b = step_dir(journal_b, version);
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
  const json write_median = write_ratios.empty() ? json() : json(median(write_ratios));
  const json publish_median = publish_ratios.empty() ? json() : json(median(publish_ratios));
  (*hooked)["modes"] = {{"compared_with", snapshot.value("label", "")},
                        {"write_vs_copy_median", write_median},
                        {"publish_vs_snapshot_median", publish_median},
                        {"compared_versions", compared},
                        {"differing_versions", differing}};
  json& targets = (*hooked)["targets"];
  json t = target("hooked_write_vs_copy", write_median, b.slack * b.write_copy_factor, "ratio");
  if (write_median.is_null()) t["why"] = "the trainer reported no write pass of a delta version";
  targets.push_back(std::move(t));
  t = target("hooked_publish_vs_snapshot", publish_median, b.slack * b.publish_factor, "ratio");
  if (publish_median.is_null()) {
    t["why"] = "no version published as a delta by both runs with the trainer's publish time";
  }
  targets.push_back(std::move(t));
  t = target("hooked_records_identical",
             compared.empty() ? json() : json(static_cast<double>(differing.size())), 0,
             "versions");
  if (compared.empty()) t["why"] = "neither journal still holds a delta step of the other";
  targets.push_back(std::move(t));
}

}  // namespace weightcast
