// `weightcast bench group`: the rank group's figures (bench/drivers/group_benchmark.h) as a table
// or as JSON, each target as measured / bound with pass or fail. The exit status is 0 when every
// run succeeded, whatever the targets say; with --check it is 1 when a checked target failed or
// could not be evaluated (docs/PERFORMANCE.md, "Rank group bench").
#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/drivers/group_benchmark.h"
#include "src/cli/commands.h"
#include "src/cli/number_flags.h"
#include "src/control/group_config.h"
#include "src/control/group_init.h"

namespace weightcast::cli {
namespace {

using nlohmann::json;

// Every target a run can report (bench/drivers/group_bench_targets.h,
// bench/drivers/group_bench_hooked.h, bench/drivers/group_bench_fp8.h).
constexpr std::array<const char*, 8> kTargets = {
    "subscriber_rss",           "bytes_written",
    "all_acked_vs_codec",       "publisher_rss",
    "hooked_write_vs_copy",     "hooked_publish_vs_snapshot",
    "hooked_records_identical", "fp8_delta_bytes_vs_bf16"};

// Bytes as MiB with `decimals`; "-" for a figure not reported.
std::string mib(const json& bytes, int decimals = 1) {
  if (!bytes.is_number()) return "-";
  char s[32];
  std::snprintf(s, sizeof s, "%.*f", decimals, bytes.get<double>() / (1 << 20));
  return s;
}

std::string num(const json& x, const char* format) {
  if (!x.is_number()) return "-";
  char s[32];
  std::snprintf(s, sizeof s, format, x.get<double>());
  return s;
}

const char* verdict(const json& t) {
  return t["pass"].is_null() ? "n/a" : t["pass"].get<bool>() ? "pass" : "FAIL";
}

void print_run(const json& run) {
  std::printf("\n== %s: %s, publisher in %s mode (%s)\n", run["label"].get<std::string>().c_str(),
              run["transport"].get<std::string>().c_str(),
              run["publisher_mode"].get<std::string>().c_str(),
              run["log"].get<std::string>().c_str());
  std::printf("%5s %-10s %14s %14s %8s %22s %12s %20s\n", "rank", "role", "peak RSS MiB", "own MiB",
              "source", "peak - engine MiB", "trainer MiB", "peak - trainer MiB");
  for (const auto& r : run["ranks"]) {
    const bool publisher = r.contains("trainer_bytes");
    std::printf("%5u %-10s %14s %14s %8s %22s %12s %20s\n", r["rank"].get<uint32_t>(),
                r["role"].get<std::string>().c_str(), mib(r["peak_rss_bytes"]).c_str(),
                mib(r["own_bytes"]).c_str(), r["peak_rss_source"].get<std::string>().c_str(),
                r.contains("peak_rss_minus_engine_bytes")
                    ? mib(r["peak_rss_minus_engine_bytes"]).c_str()
                    : "",
                publisher ? mib(r["trainer_bytes"]).c_str() : "",
                publisher ? mib(r["peak_rss_minus_trainer_bytes"]).c_str() : "");
  }
  std::printf("%8s %7s %6s %11s %11s %11s %12s %10s %12s %7s %10s %9s %9s\n", "version", "kind",
              "steady", "stored MiB", "written MiB", "read MiB", "all-acked ms", "changed",
              "enc+apply ms", "ratio", "publish ms", "write ms", "copy ms");
  for (const auto& v : run["versions"]) {
    // The largest figure over the subscribers.
    json written, read;
    for (const auto& s : v["subscribers"]) {
      const json& w = s["bytes_written"];
      if (w.is_number() && (!written.is_number() || w > written)) written = w;
      const json& r = s["bytes_read"];
      if (r.is_number() && (!read.is_number() || r > read)) read = r;
    }
    std::printf(
        "%8llu %7s %6s %11s %11s %11s %12.1f %10s %12s %7s %10s %9s %9s\n",
        v["version"].get<unsigned long long>(), v["kind"].get<std::string>().c_str(),
        v["counted"].get<bool>() ? "yes" : "no", mib(v["stored_bytes"], 3).c_str(),
        mib(written, 3).c_str(), mib(read, 3).c_str(), v["publish_to_all_acked_ms"].get<double>(),
        num(v["changed_elements"], "%.0f").c_str(), num(v["encode_apply_ms"], "%.1f").c_str(),
        num(v["ratio"], "%.2f").c_str(), num(v["publish_ms"], "%.1f").c_str(),
        num(v["write_ms"], "%.1f").c_str(), num(v["plain_copy_ms"], "%.1f").c_str());
  }
  std::printf(
      "(steady: every subscriber acked it and the version before; only those count for the "
      "targets)\n");
  std::printf("targets (measured / bound):\n");
  for (const auto& t : run["targets"]) {
    const bool bytes = t["unit"] == "bytes";
    std::string where;
    if (t.contains("rank")) where += " rank " + std::to_string(t["rank"].get<uint32_t>());
    if (t.contains("version")) where += " v" + std::to_string(t["version"].get<uint64_t>());
    const std::string measured =
        bytes ? mib(t["measured"], 3) + " MiB" : num(t["measured"], "%.2f");
    const std::string bound = bytes ? mib(t["bound"], 3) + " MiB" : num(t["bound"], "%.2f");
    // measured / bound as one figure too (how far inside or past the bound).
    const std::string ratio =
        t["measured"].is_number() && t["bound"].is_number() && t["bound"].get<double>() > 0
            ? " (" + num(t["measured"].get<double>() / t["bound"].get<double>(), "%.2f") + "x)"
            : "";
    std::printf("  %-27s%-10s %14s / %-14s %s%s%s\n", t["target"].get<std::string>().c_str(),
                where.c_str(), measured.c_str(), bound.c_str(), verdict(t), ratio.c_str(),
                t.contains("why") ? (" (" + t["why"].get<std::string>() + ")").c_str() : "");
  }
  if (run.contains("sharded")) {
    const json& k = run["sharded"];
    std::printf(
        "%u publisher ranks against the single publisher of %s, publish -> all-acked medians: "
        "deltas %s ms / %s ms = %s (median of %zu per-version ratios), anchors %s ms / %s ms = "
        "%s (%zu)\n",
        k["publishers"].get<uint32_t>(), k["compared_with"].get<std::string>().c_str(),
        num(k["ranks_delta_ms"], "%.1f").c_str(), num(k["single_delta_ms"], "%.1f").c_str(),
        num(k["delta_ratio"], "%.2f").c_str(), k["delta_versions"].size(),
        num(k["ranks_anchor_ms"], "%.1f").c_str(), num(k["single_anchor_ms"], "%.1f").c_str(),
        num(k["anchor_ratio"], "%.2f").c_str(), k["anchor_versions"].size());
  }
  if (run.contains("fp8")) {
    const json& f = run["fp8"];
    std::printf(
        "FP8 against the bf16 run %s: deltas %s MiB / %s MiB = %s over %zu versions, "
        "anchors %s MiB / %s MiB = %s\n",
        f["compared_with"].get<std::string>().c_str(), mib(f["fp8_delta_bytes"], 3).c_str(),
        mib(f["bf16_delta_bytes"], 3).c_str(), num(f["delta_ratio"], "%.3f").c_str(),
        f["delta_versions"].size(), mib(f["fp8_anchor_bytes"], 1).c_str(),
        mib(f["bf16_anchor_bytes"], 1).c_str(), num(f["anchor_ratio"], "%.3f").c_str());
  }
}

}  // namespace

void register_bench_group(CLI::App& bench, int& exit_code) {
  auto cfg = std::make_shared<GroupBenchConfig>();
  auto json_out = std::make_shared<bool>(false);
  auto check = std::make_shared<bool>(false);
  auto checked = std::make_shared<std::vector<std::string>>(
      std::vector<std::string>(kTargets.begin(), kTargets.end()));
  auto no_reference = std::make_shared<bool>(false);
  cfg->demo = WEIGHTCAST_GROUP_DEMO_PATH;
  auto* g = bench.add_subcommand(
      "group",
      "A rank group on this machine (the group demo, no faults) per transport: each rank's peak "
      "RSS and own tensor bytes, each version's bytes written and read and publish -> "
      "all-acked, next to the in-process encode + apply of the same versions, with the targets "
      "as measured / bound; progress on stderr");
  g->add_option("--parameters", cfg->parameters, "bf16 parameters of the synthetic model")
      ->capture_default_str()
      ->check(number_in<uint64_t>(kMinDemoParameters, kMaxDemoParameters));
  g->add_option("--density", cfg->density, "Fraction of elements changed per version")
      ->capture_default_str()
      ->check(number_in<double>(kMinBenchDensity, kMaxDemoDensity));
  g->add_option("--versions", cfg->versions, "Versions after the initial one (anchor every 5)")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxDemoVersions));
  g->add_option("--subscribers", cfg->subscribers, "Subscriber ranks")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, 256));
  g->add_option("--tensor-parallel", cfg->tensor_parallel,
                "Subscribers are tensor-parallel engine ranks of this size, each holding only "
                "its slices (docs/CONFIG.md layouts; --subscribers a multiple of it)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, 256));
  g->add_option("--whole-subscribers", cfg->whole_subscribers,
                "With --tensor-parallel: this many subscribers (the last ones) hold every tensor "
                "whole (a second engine layout)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(0, 256));
  g->add_option("--publisher-ranks", cfg->publisher_ranks,
                "Publisher ranks of a --publisher-mode ranks run")
      ->capture_default_str()
      ->check(number_in<uint32_t>(2, 64));
  g->add_option("--transports", cfg->transports,
                "Runs, comma-separated: fs (journal), ucx (live, in place), ucx-copy (live, "
                "from a shared-memory copy)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fs", "ucx", "ucx-copy"}))
      ->capture_default_str();
  g->add_option("--publisher-mode", cfg->publisher_modes,
                "How the publisher's trainer hands over each version, comma-separated: snapshot "
                "(read at publish, diffed against the publisher's snapshot), hooked (written "
                "through PublishStep::write) or fp8 (snapshot mode in an FP8 group); hooked and "
                "fp8 are compared with a snapshot run of the same transport, added when not "
                "listed; ranks: --publisher-ranks publisher ranks, each publishing an even shard "
                "of the model, compared the same way")
      ->delimiter(',')
      ->check(CLI::IsMember({"snapshot", "hooked", "fp8", "ranks"}))
      ->capture_default_str();
  g->add_option("--work-dir", cfg->work_dir, "Where each run's group, journal, JSON and log go")
      ->capture_default_str();
  g->add_option("--demo", cfg->demo, "The weightcast_group_demo executable")->capture_default_str();
  g->add_option("--threads", cfg->threads, "Threads of the in-process reference (0: all cores)")
      ->capture_default_str()
      ->check(number_in<size_t>(0, kMaxThreads));
  g->add_option("--timeout-s", cfg->timeout_s, "Fail a run that takes longer")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, kMaxTimeoutS));
  g->add_flag("--no-codec-reference", *no_reference,
              "Skip the in-process encode + apply (its targets are then n/a)");
  g->add_option("--bound-factor", cfg->bounds.slack, "Multiplies every target's bound")
      ->capture_default_str()
      ->check(number_in<double>(1, 1000));
  g->add_flag("--check", *check,
              "Exit 1 when a target of --check-targets fails or cannot be evaluated");
  g->add_option("--check-targets", *checked, "Targets --check enforces, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(std::vector<std::string>(kTargets.begin(), kTargets.end())))
      ->capture_default_str();
  g->add_flag("--json", *json_out, "Print one JSON object (default: tables)");
  g->callback([cfg, json_out, check, checked, no_reference, &exit_code] {
    if (const std::string why =
            tensor_parallel_refusal(cfg->subscribers, cfg->tensor_parallel, cfg->whole_subscribers);
        !why.empty()) {
      throw CLI::ValidationError("--tensor-parallel", why);
    }
    cfg->codec_reference = !*no_reference;
    cfg->log = [](const std::string& line) {
      std::fprintf(stderr, "weightcast: %s\n", line.c_str());
    };
    auto r = run_group_benchmark(*cfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::vector<std::string> failed;
    const bool pass = targets_pass((*r)["runs"], *checked, &failed);
    (*r)["check"] = *check;
    (*r)["checked_targets"] = *checked;
    (*r)["targets_pass"] = pass;
    if (*json_out) {
      std::printf("%s\n", r->dump(2).c_str());
    } else {
      std::printf(
          "rank group: %llu bf16 parameters, density %g, %llu versions, %u subscribers, "
          "publisher modes %s\n",
          static_cast<unsigned long long>(cfg->parameters), cfg->density,
          static_cast<unsigned long long>(cfg->versions), cfg->subscribers,
          (*r)["publisher_modes"].dump().c_str());
      for (const auto& run : (*r)["runs"]) print_run(run);
    }
    exit_code = 0;
    if (*check && !pass) {
      for (const auto& f : failed) std::fprintf(stderr, "weightcast: target: %s\n", f.c_str());
      exit_code = 1;
    }
  });
}

}  // namespace weightcast::cli
