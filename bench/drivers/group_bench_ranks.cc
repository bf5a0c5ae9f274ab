#include "bench/drivers/group_bench_ranks.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

namespace weightcast {

using nlohmann::json;

namespace {

json median(std::vector<double> xs) {
  if (xs.empty()) return json();
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

}  // namespace

void compare_rank_run(const json& single, json* ranks, uint32_t publishers) {
  std::map<uint64_t, const json*> one;  // into `single`, by version
  const json none = json::array();
  for (const auto& v : single.contains("versions") ? single["versions"] : none) {
    one[v.value("version", uint64_t{0})] = &v;
  }
  // Per kind (0 delta, 1 anchor): versions, ms of each run, ratios.
  std::vector<uint64_t> versions[2];
  std::vector<double> mine[2], theirs[2], ratios[2];
  for (const auto& v : (*ranks)["versions"]) {
    const uint64_t version = v.value("version", uint64_t{0});
    auto o = one.find(version);
    if (o == one.end() || o->second->value("kind", "") != v.value("kind", "")) continue;
    if (!v.value("counted", false) || !o->second->value("counted", false)) continue;
    const double a = v.value("publish_to_all_acked_ms", 0.0);
    const double b = o->second->value("publish_to_all_acked_ms", 0.0);
    if (a <= 0 || b <= 0) continue;
    const int k = v.value("kind", "") == "anchor" ? 1 : 0;
    versions[k].push_back(version);
    mine[k].push_back(a);
    theirs[k].push_back(b);
    ratios[k].push_back(a / b);
  }
  (*ranks)["sharded"] = {{"compared_with", single.value("label", "")},
                         {"publishers", publishers},
                         {"delta_versions", versions[0]},
                         {"ranks_delta_ms", median(mine[0])},
                         {"single_delta_ms", median(theirs[0])},
                         {"delta_ratio", median(ratios[0])},
                         {"anchor_versions", versions[1]},
                         {"ranks_anchor_ms", median(mine[1])},
                         {"single_anchor_ms", median(theirs[1])},
                         {"anchor_ratio", median(ratios[1])}};
}

}  // namespace weightcast
