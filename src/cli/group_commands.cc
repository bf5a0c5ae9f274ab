// `weightcast group status`: asks a running rank group's coordinator for its head, committed
// and anchor versions and every member's state.
#include <cstdio>
#include <iostream>
#include <memory>

#include "src/cli/commands.h"
#include "src/cli/number_flags.h"
#include "src/cli/path_flags.h"
#include "src/control/group_config.h"
#include "src/control/group_init.h"
#include "src/control/group_status.h"

namespace weightcast::cli {
namespace {

struct GroupStatusOptions {
  std::string config;
  std::string key_file;
  bool json = false;
  uint32_t timeout_ms = 3000;
};

void register_ranks(CLI::App* group, int& exit_code) {
  auto config_path = std::make_shared<std::string>();
  auto ids = std::make_shared<bool>(false);
  auto* ranks = group->add_subcommand(
      "ranks", "List the ranks of a group config (rank, role, host), after validating it");
  ranks->add_option("--config", *config_path, "Group config (YAML)")
      ->required()
      ->check(existing_regular_file());
  ranks->add_flag("--ids", *ids, "Print only the rank numbers, space separated");
  ranks->callback([config_path, ids, &exit_code] {
    auto config = load_group_config(*config_path);
    if (!config.ok()) {
      exit_code = report(config.status());
      return;
    }
    std::string line;
    for (const auto& r : config->ranks()) {
      if (*ids) {
        line += (line.empty() ? "" : " ") + std::to_string(r.rank());
      } else {
        std::cout << r.rank() << " " << role_name(r.role()) << " "
                  << (r.host().empty() ? "-" : r.host()) << "\n";
      }
    }
    if (*ids) std::cout << line << "\n";
  });
}

void register_init(CLI::App* group, int& exit_code) {
  auto o = std::make_shared<GroupInitOptions>();
  auto* init = group->add_subcommand(
      "init",
      "Write a ready-to-run group: a CURVE key pair per rank (and one for observers) under "
      "DIR/keys and DIR/group.yaml naming them; start it with deploy/local/weightcast-local up");
  init->add_option("--dir", o->dir, "Directory of the group (created if missing)")->required();
  init->add_option("--group-id", o->group_id, "Group id")->capture_default_str();
  // Rank 0 is the coordinator; GroupConfigLimits::max_ranks bounds the group.
  const uint32_t max_ranks = GroupConfigLimits{}.max_ranks;
  init->add_option("--publishers", o->publishers, "Publisher ranks (1..N)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, max_ranks - 1));
  init->add_option("--subscribers", o->subscribers, "Subscriber ranks (after the publishers)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(0, max_ranks - 2));
  init->add_option("--endpoint", o->endpoint,
                   "Coordinator endpoint (default: tcp://127.0.0.1:<a free port>)");
  init->add_flag("!--no-curve", o->curve, "Leave CURVE authentication off (not recommended)");
  init->add_option("--anchor-every", o->anchor_every, "Anchor interval")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxAnchorEvery));
  init->add_option("--max-in-flight", o->max_in_flight, "Versions in flight")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, kMaxInFlight));
  init->add_option("--transports", o->transports,
                   "Transports in preference order (a rank that cannot use ucx gets fs)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fs", "ucx"}))
      ->capture_default_str();
  init->add_option("--ucx-tls", o->ucx_tls,
                   "UCX_TLS value for the ucx transport (default: UCX chooses), e.g. shm,tcp");
  init->add_option("--ucx-publisher-memory", o->ucx_publisher_memory,
                   "Where the publisher serves ucx reads from: in_place, copy, or auto (copy "
                   "unless the host has RDMA devices; docs/CONFIG.md)")
      ->check(CLI::IsMember({"auto", "in_place", "copy"}));
  init->add_flag("--fp8", o->fp8,
                 "An FP8 group: engines hold the linear projections as block FP8 (fp8 section)");
  init->add_option("--tensor-parallel", o->tensor_parallel,
                   "Subscribers are engine ranks of tensor parallel size N: each holds only its "
                   "slice of each split tensor (a layouts section; --subscribers a multiple of N)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, 4096));
  init->add_option("--whole-subscribers", o->whole_subscribers,
                   "With --tensor-parallel: this many of the subscribers (the last ones) hold "
                   "every tensor whole instead (a second engine layout)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(0, 4094));
  init->add_option("--demo-parameters", o->demo_parameters,
                   "Add a demo: section (a synthetic model for publishers without a trainer)")
      ->check(number_in<uint64_t>(kMinDemoParameters, kMaxDemoParameters));
  init->add_option("--demo-versions", o->demo_versions, "Versions the demo model publishes")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxDemoVersions));
  init->add_option("--demo-step-interval-ms", o->demo_step_interval_ms,
                   "Pause of the demo publisher between versions (0: none)")
      ->capture_default_str()
      ->check(number_in<uint32_t>(0, 86400000));
  init->add_flag("--force", o->overwrite, "Replace an existing group.yaml (keys are kept)");
  init->callback([o, &exit_code] {
    // A bad command line (exit 2), not a failed command.
    if (const std::string why =
            tensor_parallel_refusal(o->subscribers, o->tensor_parallel, o->whole_subscribers);
        !why.empty()) {
      throw CLI::ValidationError("--tensor-parallel", why);
    }
    auto r = init_group(*o);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::cout << r->config_path << "\n";
  });
}

}  // namespace

void register_group_commands(CLI::App& app, int& exit_code) {
  auto* group = app.add_subcommand("group", "Inspect a rank group and its config");
  group->require_subcommand(1);
  register_init(group, exit_code);
  register_ranks(group, exit_code);
  auto o = std::make_shared<GroupStatusOptions>();
  auto* status = group->add_subcommand(
      "status",
      "Ask the coordinator for the head, committed and anchor versions and every member (rank, "
      "role, state, version held, transport, lag, last heartbeat)");
  status->add_option("--config", o->config, "Group config (YAML)")
      ->required()
      ->check(existing_regular_file());
  status->add_option("--key-file", o->key_file,
                     "CURVE key pair to connect with (default: curve.observer_key_file)");
  status->add_flag("--json", o->json, "Print JSON");
  status->add_option("--timeout-ms", o->timeout_ms, "How long to wait for the coordinator")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, kMaxTimeoutMs));
  status->callback([o, &exit_code] {
    auto config = load_group_config(o->config);
    if (!config.ok()) {
      exit_code = report(config.status());
      return;
    }
    auto reply = query_group_status(*config, o->key_file, std::chrono::milliseconds(o->timeout_ms));
    if (!reply.ok()) {
      exit_code = report(reply.status());
      return;
    }
    if (o->json) {
      std::cout << status_to_json(*reply).dump(2) << "\n";
    } else {
      std::cout << format_status(*reply);
    }
  });
}

}  // namespace weightcast::cli
