#include "bench/drivers/group_benchmark.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "bench/drivers/group_bench_fp8.h"
#include "bench/drivers/group_bench_hooked.h"
#include "bench/drivers/group_bench_ranks.h"
#include "src/control/group_config.h"

extern char** environ;

namespace weightcast {
namespace {

using nlohmann::json;

// Runs argv[0] with stdout and stderr appended to `log`; its exit status, or -1 when it did
// not exit normally.
Result<int> run_logged(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return failed_precondition("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return internal_error("waitpid: " + std::string(std::strerror(errno)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string last_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "\n  " + l;
  return out;
}

// Exactly as given: std::to_string would print 1e-9 as "0.000000".
std::string decimal(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%.17g", x);
  return s;
}

Result<std::vector<std::string>> transport_flags(const std::string& transport) {
  if (transport == "fs") return std::vector<std::string>{"--transports", "fs"};
  if (transport == "ucx") {
    return std::vector<std::string>{"--transports", "ucx,fs", "--ucx-publisher-memory", "in_place"};
  }
  if (transport == "ucx-copy") {
    return std::vector<std::string>{"--transports", "ucx,fs", "--ucx-publisher-memory", "copy"};
  }
  return invalid_argument("bench group: unknown transport '" + transport +
                          "' (fs, ucx or ucx-copy)");
}

Result<json> run_demo(const GroupBenchConfig& c, const std::string& transport,
                      const std::string& mode) {
  ASSIGN_OR_RETURN(std::vector<std::string> extra, transport_flags(transport));
  const std::string label = transport + (mode == "snapshot" ? "" : "-" + mode);
  const std::string dir = c.work_dir + "/" + label;
  const std::string json_path = dir + ".json", log = dir + ".log";
  std::error_code ec;
  std::filesystem::remove(json_path, ec);
  std::vector<std::string> argv{c.demo,
                                "--work-dir",
                                dir,
                                "--parameters",
                                std::to_string(c.parameters),
                                "--density",
                                decimal(c.density),
                                "--versions",
                                std::to_string(c.versions),
                                "--subscribers",
                                std::to_string(c.subscribers),
                                "--no-faults",
                                "--no-baseline",
                                "--timeout-s",
                                std::to_string(c.timeout_s),
                                "--json-out",
                                json_path,
                                "--publisher-mode",
                                mode == "hooked" ? "hooked" : "snapshot"};
  if (mode == "fp8") argv.push_back("--fp8");
  if (mode == "ranks") {
    argv.push_back("--publishers");
    argv.push_back(std::to_string(c.publisher_ranks));
  }
  if (c.tensor_parallel > 1) {
    argv.push_back("--tensor-parallel");
    argv.push_back(std::to_string(c.tensor_parallel));
    argv.push_back("--whole-subscribers");
    argv.push_back(std::to_string(c.whole_subscribers));
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (c.log) {
    c.log("bench group: running the group over " + transport + ", publisher in " + mode +
          " mode (log " + log + ")");
  }
  ASSIGN_OR_RETURN(const int rc, run_logged(argv, log));
  if (rc != 0) {
    return failed_precondition("bench group: the run over " + transport + " failed (exit " +
                               std::to_string(rc) + "); see " + log + ":" + last_lines(log, 15));
  }
  std::ifstream in(json_path);
  json demo = json::parse(in, nullptr, false);
  if (demo.is_discarded() || !demo.is_object()) {
    return data_loss("bench group: the run over " + transport + " wrote no readable " + json_path);
  }
  demo["log"] = log;
  demo["demo_json"] = json_path;
  demo["label"] = label;
  demo["transport"] = transport;
  return demo;
}

}  // namespace

Result<json> run_group_benchmark(const GroupBenchConfig& c) {
  if (c.transports.empty()) return invalid_argument("bench group: no transport to run");
  if (c.demo.empty()) return invalid_argument("bench group: no group demo executable given");
  std::error_code ec;
  std::filesystem::create_directories(c.work_dir, ec);
  if (ec) {
    return failed_precondition("bench group: cannot create " + c.work_dir + ": " + ec.message());
  }
  std::vector<std::string> modes;
  // hooked, fp8 and ranks runs are compared with the snapshot run, added when not given.
  for (const char* m : {"snapshot", "hooked", "fp8", "ranks"}) {
    for (const auto& given : c.publisher_modes) {
      if (given != "snapshot" && given != "hooked" && given != "fp8" && given != "ranks") {
        return invalid_argument("bench group: unknown publisher mode '" + given +
                                "' (snapshot, hooked, fp8 or ranks)");
      }
      if (given == m || (given != "snapshot" && std::string(m) == "snapshot")) {
        if (std::find(modes.begin(), modes.end(), m) == modes.end()) modes.push_back(m);
      }
    }
  }
  if (modes.empty()) return invalid_argument("bench group: no publisher mode to run");
  std::vector<json> demos;
  for (const auto& t : c.transports) {
    for (const auto& m : modes) {
      ASSIGN_OR_RETURN(json demo, run_demo(c, t, m));
      demos.push_back(std::move(demo));
    }
  }

  // The versions the group published, and the model's seed from the config the demo wrote.
  std::set<uint64_t> deltas;
  uint64_t last = 0;
  for (const auto& d : demos) {
    for (const auto& v : d.value("versions", json::array())) {
      const uint64_t version = v.value("version", uint64_t{0});
      last = std::max(last, version);
      if (!v.value("anchor", false) && version > 0) deltas.insert(version);
    }
  }
  ASSIGN_OR_RETURN(const proto::GroupConfig config,
                   load_group_config(demos.front().value("config", "")));
  json out{{"parameters", c.parameters},   {"density", c.density},
           {"versions", c.versions},       {"subscribers", c.subscribers},
           {"seed", config.demo().seed()}, {"publisher_modes", modes}};
  out["bounds"] = {{"rss_fixed_bytes", c.bounds.rss_fixed_bytes},
                   {"rss_delta_factor", c.bounds.rss_delta_factor},
                   {"written_factor", c.bounds.written_factor},
                   {"latency_factor", c.bounds.latency_factor},
                   {"publisher_snapshot_factor", c.bounds.publisher_snapshot_factor},
                   {"write_copy_factor", c.bounds.write_copy_factor},
                   {"publish_factor", c.bounds.publish_factor},
                   {"slack", c.bounds.slack}};
  std::optional<CodecReference> codec;
  out["codec"] = json();
  if (c.codec_reference && !deltas.empty()) {
    CodecReferenceConfig rc;
    rc.parameters = config.demo().parameters();
    rc.density = config.demo().density();
    rc.seed = config.demo().seed();
    rc.threads = c.threads;
    rc.last_version = last;
    rc.delta_versions = deltas;
    rc.log = c.log;
    if (c.log) c.log("bench group: measuring encode + apply of the same versions in-process");
    ASSIGN_OR_RETURN(codec, measure_codec_reference(rc));
    json versions = json::array();
    for (const auto& f : codec->versions) {
      versions.push_back({{"version", f.version},
                          {"changed_elements", f.changed_elements},
                          {"changed_tensors", f.changed_tensors},
                          {"record_bytes", f.record_bytes},
                          {"encode_ms", f.encode_s * 1e3},
                          {"apply_ms", f.apply_s * 1e3}});
    }
    out["codec"] = {{"parameters", codec->parameters},
                    {"tensors", codec->tensors},
                    {"threads", codec->threads},
                    {"versions", versions}};
  }
  out["runs"] = json::array();
  for (const auto& d : demos) {
    // The codec reference encodes the bf16 model: an FP8 run's targets against it would
    // compare other bytes, so it has none (its own target is compare_fp8_run's).
    const bool fp8 = d.value("label", "").ends_with("-fp8");
    const bool ranks = d.value("label", "").ends_with("-ranks");
    json run = summarize_group_run(d, codec && !fp8 ? &*codec : nullptr, c.bounds);
    run["publisher_mode"] = fp8 ? "fp8" : ranks ? "ranks" : run.value("publisher_mode", "snapshot");
    run["label"] = d["label"];
    run["transport"] = d["transport"];
    run["journal_root"] = d.value("journal_root", "");
    run["demo_json"] = d["demo_json"];
    run["log"] = d["log"];
    run["acks_by_transport"] = d.value("acks_by_transport", json::object());
    out["runs"].push_back(std::move(run));
  }
  // Each hooked and fp8 run next to the snapshot run of its transport (run before it).
  for (size_t i = 1; i < out["runs"].size(); ++i) {
    json& run = out["runs"][i];
    for (size_t k = i; k-- > 0;) {
      const json& before = out["runs"][k];
      if (before["publisher_mode"] != "snapshot" || before["transport"] != run["transport"]) {
        continue;
      }
      if (run["publisher_mode"] == "hooked") compare_publisher_modes(before, &run, c.bounds);
      if (run["publisher_mode"] == "fp8") compare_fp8_run(before, &run, c.bounds);
      if (run["publisher_mode"] == "ranks") compare_rank_run(before, &run, c.publisher_ranks);
      break;
    }
  }
  return out;
}

}  // namespace weightcast
