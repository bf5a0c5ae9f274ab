// weightcast_group_demo (what `make demo` runs): a whole rank group on one machine, started
// through deploy/local/weightcast-local: a coordinator, a publisher of a synthetic
// Qwen3-MoE-shaped bf16 model (~268 M parameters, ~1 % of elements changed per version, an
// anchor every 5) and two subscribers, on loopback with CURVE keys. Mid-run one subscriber is
// killed with SIGKILL and restarted; at version 12 a third subscriber joins from the anchor.
// A live table shows every committed version (bytes stored, publish -> all-acked latency,
// each subscriber's checksum result and how the version reached it: "ok/ucx" read from the
// publisher's memory over UCX, "ok/fs" from the journal) and a summary closes the run. Exits
// non-zero on any checksum mismatch or nack, a subscriber not ending on the last version, a rank
// failing, or the run taking longer than --timeout-s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "examples/group_demo_baseline.h"
#include "examples/group_demo_report.h"
#include "examples/group_demo_setup.h"
#include "src/cli/number_flags.h"
#include "src/control/group_config.h"
#include "src/control/group_status.h"

namespace {

using namespace weightcast;
using namespace weightcast::demo;
using Clock = std::chrono::steady_clock;

int launcher(const DemoArgs& a, const DemoGroup& g, const std::string& args) {
  const std::string cmd = "'" + a.launcher + "' " + args + " --state '" + g.state_dir +
                          "' --bin '" + a.bin_dir + "' >/dev/null";
  return std::system(cmd.c_str());
}

// A subscriber's result on a version, with how the version reached it ("ok/ucx").
std::string cell(const proto::VersionStatus& v, uint32_t rank, std::string* result) {
  for (const auto& r : v.results()) {
    if (r.rank() == rank) {
      *result = r.result();
      return r.transport().empty() ? r.result() : r.result() + "/" + r.transport();
    }
  }
  *result = "-";
  return "-";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weightcast_group_demo: a coordinator, a publisher and subscribers on loopback"};
  DemoArgs a;
  a.work_dir = "/tmp/weightcast-demo";
  a.bin_dir = WEIGHTCAST_BIN_DIR;
  a.launcher = WEIGHTCAST_SOURCE_DIR "/deploy/local/weightcast-local";
  uint32_t timeout_s = 1800;
  bool no_faults = false;
  app.add_option("--work-dir", a.work_dir, "Keys, group.yaml, journal and rank logs")
      ->capture_default_str();
  using weightcast::cli::number_in;
  app.add_option("--parameters", a.parameters, "bf16 parameters of the model")
      ->capture_default_str()
      ->check(number_in<uint64_t>(kMinDemoParameters, kMaxDemoParameters));
  app.add_option("--density", a.density, "Fraction of elements changed per version")
      ->capture_default_str()
      ->check(number_in<double>(1e-9, kMaxDemoDensity));
  app.add_option("--versions", a.versions, "Versions after the initial one")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxDemoVersions));
  app.add_option("--anchor-every", a.anchor_every, "Anchor interval")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxAnchorEvery));
  app.add_option("--subscribers", a.subscribers, "Subscribers started with the group")
      ->capture_default_str()
      ->check(number_in<uint32_t>(0, 256));
  app.add_option("--publishers", a.publishers,
                 "Publisher ranks, each publishing an even shard of the model (no rank holds the "
                 "published model; the first commits)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, 64));
  app.add_option("--join-at", a.join_at, "Version at which the late subscriber starts")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxDemoVersions));
  app.add_option("--kill-at", a.kill_at, "Version at which a subscriber is SIGKILLed")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxDemoVersions));
  app.add_option("--step-interval-ms", a.step_interval_ms,
                 "Pause of the publisher between versions (so faults land mid-run)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(0, 60000));
  app.add_flag("--no-faults", no_faults, "No late joiner and no kill (benchmark runs)");
  app.add_flag("!--no-baseline", a.baseline, "Skip the full-safetensors write+read baseline");
  app.add_option("--json-out", a.json_out,
                 "Write per-version and per-rank figures as JSON (examples/group_demo_report.h)");
  app.add_option("--transports", a.transports, "Transports in preference order")
      ->delimiter(',')
      ->check(CLI::IsMember({"fs", "ucx"}))
      ->capture_default_str();
  app.add_option("--ucx-tls", a.ucx_tls, "UCX_TLS for the ucx transport (default: UCX chooses)");
  app.add_option("--ucx-publisher-memory", a.ucx_publisher_memory,
                 "Where the publisher serves ucx reads from: in_place, copy or auto (default)")
      ->check(CLI::IsMember({"auto", "in_place", "copy"}));
  app.add_option("--publisher-mode", a.publisher_mode,
                 "How the publisher's trainer hands it each version: snapshot (read at publish) "
                 "or hooked (written through PublishStep::write)")
      ->check(CLI::IsMember({"snapshot", "hooked"}))
      ->capture_default_str();
  app.add_flag("--fp8", a.fp8,
               "An FP8 group: engines hold the linear projections as block FP8 (docs/CONFIG.md, "
               "fp8)");
  app.add_option("--tensor-parallel", a.tensor_parallel,
                 "Subscribers are tensor-parallel engine ranks of this size holding only their "
                 "slices (all subscribers, the late joiner included, whole replicas)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--whole-subscribers", a.whole_subscribers,
                 "With --tensor-parallel: this many subscribers (the last ones) hold every tensor "
                 "whole (a second engine layout)")
      ->check(CLI::Range(0u, 256u));
  app.add_option("--bin", a.bin_dir, "Directory of weightcastd and weightcast")
      ->capture_default_str();
  app.add_option("--timeout-s", timeout_s, "Fail when the run takes longer")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, weightcast::cli::kMaxTimeoutS));
  CLI11_PARSE(app, argc, argv);
  if (no_faults) a.late_joiner = a.kill_restart = false;
  // The trainer's own figures come with the JSON (examples/group_demo_report.h).
  // Benchmark runs only: the trainer then publishes one version at a time.
  if (!a.json_out.empty() && no_faults) {
    a.figures_path = std::filesystem::absolute(a.work_dir + "/publisher_figures.jsonl").string();
  }

  auto group = prepare_demo_group(a);
  if (!group.ok()) {
    std::fprintf(stderr, "demo: %s\n", group.status().to_string().c_str());
    return 1;
  }
  const DemoGroup& g = *group;
  auto config = load_group_config(g.config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "demo: %s\n", config.status().to_string().c_str());
    return 1;
  }
  std::printf("weightcast demo: %s (journal %s, rank logs in %s)\n", g.config_path.c_str(),
              g.journal_root.c_str(), g.state_dir.c_str());
  const uint32_t late = g.first_subscriber + g.subscriber_ranks - 1;
  const uint32_t victim = g.first_subscriber + (a.subscribers > 1 ? 1 : 0);
  std::string ranks = std::to_string(g.coordinator);
  for (uint32_t i = 0; i < a.subscribers; ++i)
    ranks += " " + std::to_string(g.first_subscriber + i);
  for (uint32_t i = 0; i < g.publishers; ++i) ranks += " " + std::to_string(g.publisher + i);
  if (launcher(a, *group, "up --config '" + g.config_path + "' --ranks '" + ranks + "'") != 0) {
    std::fprintf(stderr, "demo: the launcher failed to start the ranks\n");
    return 1;
  }

  const uint64_t last = a.versions;
  std::printf("%8s %7s %10s %12s", "version", "kind", "stored MB", "all-acked ms");
  for (uint32_t r = g.first_subscriber; r <= late; ++r) std::printf("  rank %-8u", r);
  std::printf("\n");
  std::map<uint64_t, proto::VersionStatus> printed;
  std::map<uint32_t, std::string> transports;  // each subscriber's, as last printed
  bool killed = false, restarted = false, joined = false, failed = false;
  uint64_t killed_at_head = 0, joined_at_head = 0;
  std::string failure;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  proto::StatusReply status;
  while (true) {
    if (Clock::now() > deadline) {
      failure = "the run took longer than " + std::to_string(timeout_s) + " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto s = query_group_status(*config, "", std::chrono::milliseconds(1000));
    if (!s.ok()) continue;  // the coordinator is starting
    status = *s;
    for (const auto& v : status.versions()) {
      if (!v.committed() || printed.count(v.version())) continue;
      printed[v.version()] = v;
      std::printf("%8llu %7s %10.2f %12.1f", static_cast<unsigned long long>(v.version()),
                  v.anchor() ? "anchor" : "delta", v.stored_bytes() / 1e6,
                  v.publish_to_commit_us() / 1e3);
      for (uint32_t r = g.first_subscriber; r <= late; ++r) {
        std::string result;
        const std::string c = cell(v, r, &result);
        if (result == "mismatch" || result == "nack") {
          failed = true;
          failure = "rank " + std::to_string(r) + " " + result + " on version " +
                    std::to_string(v.version());
        }
        std::printf("  %-13s", c.c_str());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    for (const auto& m : status.members()) {
      if (m.role() != proto::ROLE_SUBSCRIBER || m.transport().empty()) continue;
      if (transports[m.rank()] == m.transport()) continue;
      transports[m.rank()] = m.transport();
      // The publisher, on this host, resolves ucx.publisher_memory by the same rule.
      const char* ucx_how = ucx_live_serves_copies(a.ucx_publisher_memory)
                                ? "deltas read over UCX from the publisher's copy in shared memory"
                                : "deltas read over UCX from the publisher's memory, in place";
      std::printf("-- subscriber rank %u uses %s (%s)\n", m.rank(), m.transport().c_str(),
                  m.transport() == "ucx" ? ucx_how : "versions read from the journal");
    }
    const uint64_t head = status.has_head() ? status.head_version() : 0;
    if (a.kill_restart && !killed && status.has_head() && head >= a.kill_at) {
      std::printf("-- SIGKILL subscriber rank %u at head v%llu\n", victim,
                  static_cast<unsigned long long>(head));
      killed = launcher(a, g, "signal --rank " + std::to_string(victim) + " --signal KILL") == 0;
      killed_at_head = head;
      launcher(a, g, "wait --rank " + std::to_string(victim) + " --timeout 30");
      restarted =
          launcher(a, g,
                   "start --config '" + g.config_path + "' --rank " + std::to_string(victim)) == 0;
      std::printf("-- restarted subscriber rank %u: it catches up from the journal\n", victim);
    }
    if (a.late_joiner && !joined && status.has_head() && head >= a.join_at) {
      std::printf("-- starting late subscriber rank %u at head v%llu (latest anchor v%llu)\n", late,
                  static_cast<unsigned long long>(head),
                  static_cast<unsigned long long>(status.anchor_version()));
      joined =
          launcher(a, g, "start --config '" + g.config_path + "' --rank " + std::to_string(late)) ==
          0;
      joined_at_head = head;
      if (!joined) {
        failed = true;
        failure = "the late subscriber rank " + std::to_string(late) + " failed to start";
      }
    }
    // Done when the last version is committed and every subscriber holds it.
    if (status.has_committed() && status.committed_version() >= last) {
      uint32_t at_last = 0;
      for (const auto& m : status.members()) {
        if (m.role() == proto::ROLE_SUBSCRIBER && m.state() == "live" && m.holds_version() &&
            m.held_version() == last) {
          ++at_last;
        }
      }
      if (at_last == g.subscriber_ranks - (a.late_joiner && !joined ? 1 : 0)) break;
    }
    if (failed) break;
  }
  std::printf("\n%s", format_status(status).c_str());
  const nlohmann::json rank_figures = ranks_json(status);  // before the ranks stop: VmHWM
  const int down = launcher(a, g, "down --grace 20");
  if (down != 0 && failure.empty()) failure = "a rank did not stop cleanly (see its log)";
  if (a.kill_restart && !(killed && restarted) && failure.empty()) failure = "kill/restart failed";
  // The faults must land mid-run, or the run proved nothing about them: the kill before the
  // last version, the late join too (it then catches up to a head that still moves).
  if (a.kill_restart && killed && killed_at_head >= last && failure.empty()) {
    failure = "the kill landed at v" + std::to_string(killed_at_head) +
              ", after the last version (pace the publisher: --step-interval-ms)";
  }
  if (a.late_joiner && joined && joined_at_head >= last && failure.empty()) {
    failure = "the late subscriber started at v" + std::to_string(joined_at_head) +
              ", after the last version (pace the publisher: --step-interval-ms)";
  }
  if (a.late_joiner && !joined && failure.empty()) failure = "the late subscriber never started";

  std::vector<double> delta_ms, anchor_ms;
  std::map<std::string, uint64_t> acks_by_transport;
  uint64_t stored = 0;
  for (const auto& [v, s] : printed) {
    (s.anchor() ? anchor_ms : delta_ms).push_back(s.publish_to_commit_us() / 1e3);
    stored += s.stored_bytes();
    for (const auto& r : s.results()) {
      if (r.result() == "ok") ++acks_by_transport[r.transport().empty() ? "?" : r.transport()];
    }
  }
  std::printf(
      "\nsummary: %zu versions committed, %.1f MB stored in the journal; publish -> "
      "all-acked median %.0f ms for deltas (%zu), %.0f ms for anchors (%zu)\n",
      printed.size(), stored / 1e6, median(delta_ms), delta_ms.size(), median(anchor_ms),
      anchor_ms.size());
  std::string by;
  for (const auto& [t, n] : acks_by_transport) {
    by += (by.empty() ? "" : ", ") + std::to_string(n) + " over " + t;
  }
  std::printf("acks by transport: %s\n", by.empty() ? "none" : by.c_str());
  nlohmann::json steps = publisher_steps_json(a.figures_path);
  std::vector<double> write_ms, copy_ms, publish_ms;
  for (const auto& st : steps) {
    if (st.value("anchor", false)) continue;
    write_ms.push_back(st.value("write_ms", 0.0));
    copy_ms.push_back(st.value("plain_copy_ms", 0.0));
    publish_ms.push_back(st.value("publish_ms", 0.0));
  }
  if (!publish_ms.empty()) {
    std::printf("publisher (%s): delta publish -> published median %.1f ms",
                a.publisher_mode.c_str(), median(publish_ms));
    if (a.publisher_mode == "hooked") {
      std::printf(", write pass median %.1f ms, plain copy of the same values %.1f ms",
                  median(write_ms), median(copy_ms));
    }
    std::printf("\n");
  }
  nlohmann::json out{{"parameters", a.parameters},
                     {"subscribers", g.subscriber_ranks},
                     {"publishers", g.publishers},
                     {"density", a.density},
                     {"config", g.config_path},
                     {"journal_root", g.journal_root},
                     {"versions", versions_json(printed, status)},
                     {"ranks", rank_figures},
                     {"median_delta_ms", median(delta_ms)},
                     {"median_anchor_ms", median(anchor_ms)},
                     {"acks_by_transport", acks_by_transport},
                     {"publisher_mode", a.publisher_mode},
                     {"publisher_steps", steps}};
  if (a.baseline && failure.empty()) {
    auto b = measure_full_safetensors_baseline(g.journal_root, a.work_dir);
    if (b.ok()) {
      std::printf(
          "baseline (same model as full safetensors, same disk, this run): write+fsync "
          "%.0f ms, read %.0f ms; for %u subscribers %.0f ms -> a delta version costs "
          "%.2fx of that\n",
          b->write_s * 1e3, b->read_s * 1e3, g.subscriber_ranks,
          (b->write_s + g.subscriber_ranks * b->read_s) * 1e3,
          median(delta_ms) / ((b->write_s + g.subscriber_ranks * b->read_s) * 1e3));
      out["baseline_write_ms"] = b->write_s * 1e3;
      out["baseline_read_ms"] = b->read_s * 1e3;
      out["baseline_bytes"] = b->bytes;
    } else {
      std::printf("baseline skipped: %s\n", b.status().to_string().c_str());
    }
  }
  if (!a.json_out.empty()) std::ofstream(a.json_out) << out.dump(2) << "\n";
  if (!failure.empty()) {
    std::printf("demo FAILED: %s\n", failure.c_str());
    return 1;
  }
  std::printf(
      "demo OK: every subscriber acked every version it applied with matching "
      "checksums and ended on v%llu\n",
      static_cast<unsigned long long>(last));
  return 0;
}
