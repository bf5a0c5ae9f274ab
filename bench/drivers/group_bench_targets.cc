#include "bench/drivers/group_bench_targets.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace weightcast {
namespace {

using nlohmann::json;

uint64_t u64(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || !it->is_number() ? 0 : it->get<uint64_t>();
}

// The largest value of `key` over the results of `rank` in every version.
uint64_t max_result(const json& versions, uint32_t rank, const char* key) {
  uint64_t best = 0;
  for (const auto& v : versions) {
    for (const auto& r : v.value("results", json::array())) {
      if (r.value("rank", 0u) == rank) best = std::max(best, u64(r, key));
    }
  }
  return best;
}

uint64_t max_version(const json& versions, const char* key) {
  uint64_t best = 0;
  for (const auto& v : versions) best = std::max(best, u64(v, key));
  return best;
}

}  // namespace

double bench_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

json bench_target(const char* name, json measured, double bound, const char* unit) {
  json t{{"target", name}, {"measured", measured}, {"bound", bound}, {"unit", unit}};
  t["pass"] = measured.is_null() ? json() : json(measured.get<double>() <= bound);
  return t;
}

json summarize_group_run(const json& demo, const CodecReference* codec, const GroupBenchBounds& b) {
  const json versions = demo.value("versions", json::array());
  std::map<uint64_t, const CodecVersionFigures*> reference;
  if (codec) {
    for (const auto& f : codec->versions) reference[f.version] = &f;
  }
  uint64_t largest_delta = 0;
  for (const auto& v : versions) {
    if (!v.value("anchor", false)) largest_delta = std::max(largest_delta, u64(v, "stored_bytes"));
  }
  const uint64_t model_bytes = max_version(versions, "publisher_model_bytes");
  const std::string mode = demo.value("publisher_mode", "snapshot");
  // The demo trainer's own figures, by version.
  std::map<uint64_t, json> steps;
  uint64_t trainer_bytes = 0;
  for (const auto& st : demo.value("publisher_steps", json::array())) {
    steps[u64(st, "version")] = st;
    trainer_bytes = std::max(trainer_bytes, u64(st, "trainer_bytes"));
  }
  json out{{"largest_delta_bytes", largest_delta}, {"publisher_mode", mode}};
  json targets = json::array();

  // Per rank: peak RSS and the bytes of its own tensors.
  out["ranks"] = json::array();
  const double rss_bound =
      b.slack * (static_cast<double>(b.rss_fixed_bytes) + b.rss_delta_factor * largest_delta);
  for (const auto& r : demo.value("ranks", json::array())) {
    const std::string role = r.value("role", "");
    const uint32_t rank = r.value("rank", 0u);
    if (role != "subscriber" && role != "publisher") continue;
    const bool subscriber = role == "subscriber";
    // Several publisher ranks: only the lead offers (its own peak), so each rank's is its VmHWM.
    const bool sharded = !subscriber && demo.value("publishers", 1u) > 1;
    uint64_t peak = subscriber ? max_result(versions, rank, "peak_rss_bytes")
                    : sharded  ? 0
                               : max_version(versions, "publisher_peak_rss_bytes");
    std::string peak_source = peak ? (subscriber ? "ack" : "offer") : "none";
    if (peak == 0 && u64(r, "vm_hwm_bytes") != 0) {
      peak = u64(r, "vm_hwm_bytes");
      peak_source = "vm_hwm";
    }
    uint64_t own = subscriber ? max_result(versions, rank, "engine_bytes") : model_bytes;
    std::string own_source = own ? (subscriber ? "ack" : "offer") : "none";
    if (own == 0 && subscriber && model_bytes != 0) {
      own = model_bytes;
      own_source = "publisher_model_bytes";
    }
    json entry{{"rank", rank},
               {"role", role},
               {"peak_rss_bytes", peak ? json(peak) : json()},
               {"peak_rss_source", peak_source},
               {"own_bytes", own ? json(own) : json()},
               {"own_bytes_source", own_source}};
    if (!subscriber) {
      const bool known = peak != 0 && trainer_bytes != 0 && model_bytes != 0;
      const json excess =
          known ? json(static_cast<int64_t>(peak) - static_cast<int64_t>(trainer_bytes)) : json();
      entry["trainer_bytes"] = trainer_bytes ? json(trainer_bytes) : json();
      entry["peak_rss_minus_trainer_bytes"] = excess;
      const double bound =
          mode == "hooked" ? rss_bound : b.slack * b.publisher_snapshot_factor * model_bytes;
      json t = bench_target("publisher_rss", excess, bound, "bytes");
      t["rank"] = rank;
      if (!known)
        t["why"] = "the publisher's peak RSS, model bytes or trainer figures were not reported";
      targets.push_back(std::move(t));
    }
    if (subscriber) {
      const bool known = peak != 0 && own != 0;
      const json excess =
          known ? json(static_cast<int64_t>(peak) - static_cast<int64_t>(own)) : json();
      entry["peak_rss_minus_engine_bytes"] = excess;
      json t = bench_target("subscriber_rss", excess, rss_bound, "bytes");
      t["rank"] = rank;
      if (!known) t["why"] = "the subscriber's peak RSS or engine bytes were not reported";
      targets.push_back(std::move(t));
    }
    out["ranks"].push_back(std::move(entry));
  }

  // Per version: bytes written and read, publish -> all-acked, the reference next to it.
  std::vector<uint32_t> subscribers;
  for (const auto& r : demo.value("ranks", json::array())) {
    if (r.value("role", "") == "subscriber") subscribers.push_back(r.value("rank", 0u));
  }
  // Which subscribers acked each version "ok".
  std::map<uint64_t, std::set<uint32_t>> ok;
  for (const auto& v : versions) {
    for (const auto& r : v.value("results", json::array())) {
      if (r.value("result", "") == "ok") ok[u64(v, "version")].insert(r.value("rank", 0u));
    }
  }
  const auto all_acked = [&](uint64_t version) {
    auto it = ok.find(version);
    if (subscribers.empty() || it == ok.end()) return false;
    for (uint32_t rank : subscribers) {
      if (!it->second.count(rank)) return false;
    }
    return true;
  };
  out["versions"] = json::array();
  std::vector<double> ratios;
  for (const auto& v : versions) {
    const uint64_t version = u64(v, "version");
    const bool anchor = v.value("anchor", false);
    const double acked_ms = v.value("publish_to_commit_ms", 0.0);
    auto ref = reference.find(version);
    const CodecVersionFigures* f = ref == reference.end() ? nullptr : ref->second;
    json entry{{"version", version},
               {"kind", anchor ? "anchor" : "delta"},
               {"stored_bytes", u64(v, "stored_bytes")},
               {"publish_to_all_acked_ms", acked_ms},
               {"changed_elements", f ? json(f->changed_elements) : json()},
               {"encode_ms", f ? json(f->encode_s * 1e3) : json()},
               {"apply_ms", f ? json(f->apply_s * 1e3) : json()},
               {"encode_apply_ms", f ? json((f->encode_s + f->apply_s) * 1e3) : json()},
               {"ratio", json()},
               {"subscribers", json::array()}};
    auto st = steps.find(version);
    for (const char* key : {"publish_ms", "write_ms", "plain_copy_ms"}) {
      const bool known = st != steps.end() && st->second.contains(key) &&
                         (mode == "hooked" || std::string(key) == "publish_ms");
      entry[key] = known ? st->second[key] : json();
    }
    // The header's rule: every subscriber acked this version and the one before it.
    const bool counted = all_acked(version) && version > 0 && all_acked(version - 1);
    entry["acked_by_all"] = all_acked(version);
    entry["counted"] = counted;
    const double codec_ms = f ? (f->encode_s + f->apply_s) * 1e3 : 0;
    if (!anchor && counted && codec_ms > 0) {
      entry["ratio"] = acked_ms / codec_ms;
      ratios.push_back(acked_ms / codec_ms);
    }
    for (const auto& r : v.value("results", json::array())) {
      const uint64_t written = u64(r, "bytes_written"), read = u64(r, "bytes_read");
      entry["subscribers"].push_back({{"rank", r.value("rank", 0u)},
                                      {"result", r.value("result", "")},
                                      {"transport", r.value("transport", "")},
                                      {"bytes_written", written ? json(written) : json()},
                                      {"bytes_read", read ? json(read) : json()}});
      if (anchor || !counted) continue;
      const bool known = written != 0 && f != nullptr;
      json t = bench_target(
          "bytes_written", known ? json(written) : json(),
          f ? b.slack * b.written_factor * f->changed_elements * f->element_bytes : 0, "bytes");
      t["rank"] = r.value("rank", 0u);
      t["version"] = version;
      if (!f) t["bound"] = json();
      if (!known) {
        t["why"] = f ? "the subscriber reported no bytes_written"
                     : "no codec reference (changed elements unknown)";
      }
      targets.push_back(std::move(t));
    }
    out["versions"].push_back(std::move(entry));
  }
  // Every target gets a row: one that no version could measure says why.
  const bool any_written = std::any_of(targets.begin(), targets.end(), [](const json& t) {
    return t.value("target", "") == "bytes_written";
  });
  if (!any_written) {
    json t = bench_target("bytes_written", json(), 0, "bytes");
    t["bound"] = json();
    t["why"] = "no delta version acked by every subscriber after the version before it";
    targets.push_back(std::move(t));
  }
  const json median_ratio = ratios.empty() ? json() : json(bench_median(ratios));
  out["median_delta_ratio"] = median_ratio;
  json t = bench_target("all_acked_vs_codec", median_ratio, b.slack * b.latency_factor, "ratio");
  if (median_ratio.is_null()) {
    t["why"] = "no codec reference, or no delta version acked by every subscriber";
  }
  targets.push_back(std::move(t));
  out["targets"] = std::move(targets);
  return out;
}

bool targets_pass(const json& runs, const std::vector<std::string>& names,
                  std::vector<std::string>* failed) {
  bool all = true;
  for (const auto& run : runs) {
    for (const auto& t : run.value("targets", json::array())) {
      const std::string name = t.value("target", "");
      if (std::find(names.begin(), names.end(), name) == names.end()) continue;
      if (t["pass"].is_boolean() && t["pass"].get<bool>()) continue;
      all = false;
      if (!failed) continue;
      std::string where = run.value("transport", "");
      if (t.contains("rank")) where += " rank " + std::to_string(t["rank"].get<uint32_t>());
      if (t.contains("version")) where += " v" + std::to_string(t["version"].get<uint64_t>());
      failed->push_back(name + " (" + where + "): " +
                        (t["pass"].is_null() ? "not evaluated: " + t.value("why", "")
                                             : "measured " + t["measured"].dump() + " > bound " +
                                                   t["bound"].dump()));
    }
  }
  return all;
}

}  // namespace weightcast
