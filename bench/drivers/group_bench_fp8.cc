#include "bench/drivers/group_bench_fp8.h"

#include <cstdint>
#include <map>

namespace weightcast {

using nlohmann::json;

void compare_fp8_run(const json& bf16, json* fp8, const GroupBenchBounds& b) {
  std::map<uint64_t, const json*> plain;  // into `bf16`, by version
  const json none = json::array();
  for (const auto& v : bf16.contains("versions") ? bf16["versions"] : none) {
    plain[v.value("version", uint64_t{0})] = &v;
  }
  uint64_t fp8_delta = 0, bf16_delta = 0, fp8_anchor = 0, bf16_anchor = 0;
  json versions = json::array();
  for (const auto& v : (*fp8)["versions"]) {
    const uint64_t version = v.value("version", uint64_t{0});
    auto p = plain.find(version);
    if (p == plain.end() || p->second->value("kind", "") != v.value("kind", "")) continue;
    const uint64_t mine = v.value("stored_bytes", uint64_t{0});
    const uint64_t theirs = p->second->value("stored_bytes", uint64_t{0});
    if (v.value("kind", "") == "anchor") {
      fp8_anchor += mine;
      bf16_anchor += theirs;
      continue;
    }
    fp8_delta += mine;
    bf16_delta += theirs;
    versions.push_back(version);
  }
  const auto ratio = [](uint64_t a, uint64_t b) {
    return b == 0 ? json() : json(static_cast<double>(a) / static_cast<double>(b));
  };
  const json delta_ratio = ratio(fp8_delta, bf16_delta);
  (*fp8)["fp8"] = {{"compared_with", bf16.value("label", "")},
                   {"delta_versions", versions},
                   {"fp8_delta_bytes", fp8_delta},
                   {"bf16_delta_bytes", bf16_delta},
                   {"delta_ratio", delta_ratio},
                   {"fp8_anchor_bytes", fp8_anchor},
                   {"bf16_anchor_bytes", bf16_anchor},
                   {"anchor_ratio", ratio(fp8_anchor, bf16_anchor)}};
  json t =
      bench_target("fp8_delta_bytes_vs_bf16", delta_ratio, b.slack * b.fp8_bytes_factor, "ratio");
  if (delta_ratio.is_null()) t["why"] = "no version published as a delta by both runs";
  (*fp8)["targets"].push_back(std::move(t));
}

}  // namespace weightcast
