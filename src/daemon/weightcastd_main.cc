// weightcastd --config group.yaml --rank R: one rank of a rank group. The role
// comes from the config: the coordinator, a publisher (without an embedding trainer it
// publishes the config's synthetic demo model) or a subscriber (without an embedding engine
// it holds the journal's tensors in its own memory and verifies every version).
//
// Exit status: 0 after a clean shutdown (SIGTERM/SIGINT, or a publisher done with its
// versions), 2 for a bad command line or config (the reason on stderr), 1 for a runtime
// failure (a refused rank, a journal error, an exception that escaped a library: it is
// reported with its what() rather than aborting the process).
#include <csignal>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "src/cli/number_flags.h"
#include "src/cli/path_flags.h"
#include "src/control/coordinator.h"
#include "src/control/group_config.h"
#include "src/control/listen_socket.h"
#include "src/daemon/rank_roles.h"

namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int signal) {
  g_signal = signal;
}

int run(int argc, char** argv) {
  using namespace weightcast;
  using cli::number_in;
  CLI::App app{
      "weightcastd: one rank of a weightcast rank group (coordinator, publisher or "
      "subscriber, by the group config)"};
  std::string config_path;
  uint32_t rank = 0;
  DaemonOptions options;
  std::string level = "info";
  app.add_option("--config", config_path, "Group config (YAML; see docs/CONFIG.md)")
      ->required()
      ->check(weightcast::cli::existing_regular_file());
  app.add_option("--rank", rank, "This process's rank in the config")
      ->required()
      ->check(number_in<uint32_t>(0, std::numeric_limits<uint32_t>::max()));
  app.add_option("--threads", options.threads, "Worker threads (0: all cores)")
      ->check(number_in<size_t>(0, cli::kMaxThreads));
  app.add_option("--start-version", options.start_version,
                 "Publisher: first version when the journal is empty (default 0)")
      ->check(number_in<uint64_t>(0, cli::kMaxVersion));
  app.add_flag("--stay", options.stay,
               "Publisher: keep running after the demo model's last version");
  app.add_option("--listen-fd", options.listen_fd,
                 "Coordinator: serve this inherited listening TCP socket instead of binding the "
                 "endpoint (systemd socket activation passes 3); its port must be the endpoint's")
      ->check(number_in<int>(0, std::numeric_limits<int>::max()));
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any other parse error is a bad command line: 2, as documented above
    // (CLI11's own codes, 105 and up, would read as runtime failures to a supervisor).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  auto config = load_group_config(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "weightcastd: bad config: %s\n", config.status().to_string().c_str());
    return 2;
  }
  auto entry = find_rank(*config, rank);
  if (!entry.ok()) {
    std::fprintf(stderr, "weightcastd: %s\n", entry.status().to_string().c_str());
    return 2;
  }
  if (options.listen_fd >= 0 && entry->role() != proto::ROLE_COORDINATOR) {
    std::fprintf(stderr, "weightcastd: --listen-fd is for the coordinator; rank %u is a %s\n", rank,
                 std::string(role_name(entry->role())).c_str());
    return 2;
  }
  if (options.listen_fd >= 0) {
    const std::string bind = config->coordinator_bind().empty() ? config->coordinator_endpoint()
                                                                : config->coordinator_bind();
    if (Status s = check_listen_socket(options.listen_fd, bind); !s.ok()) {
      std::fprintf(stderr, "weightcastd: %s\n", s.to_string().c_str());
      return 2;
    }
  }
  if (entry->role() == proto::ROLE_PUBLISHER &&
      options.start_version > cli::kMaxVersion - config->demo().versions()) {
    std::fprintf(stderr,
                 "weightcastd: --start-version %llu plus demo.versions %llu pass the largest "
                 "version (%llu)\n",
                 static_cast<unsigned long long>(options.start_version),
                 static_cast<unsigned long long>(config->demo().versions()),
                 static_cast<unsigned long long>(cli::kMaxVersion));
    return 2;
  }

  // Each line names the rank, its host and pid ("[subscriber 2 engine1/4711]"), as
  // `weightcast group status` does, so logs gathered from many hosts stay attributable.
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "?");
  auto logger = spdlog::stderr_color_mt("weightcastd");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e [" + std::string(role_name(entry->role())) + " " +
                      std::to_string(rank) + " " + host + "/%P] %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
  options.rank = rank;
  options.log = [](const std::string& line) { spdlog::info("{}", line); };
  options.stop_requested = [] { return g_signal != 0; };

  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);

  spdlog::info("group '{}', coordinator {}, journal {}", config->group_id(),
               config->coordinator_endpoint(), config->journal_root());
  Status status = ok_status();
  switch (entry->role()) {
    case proto::ROLE_COORDINATOR:
      status = run_coordinator_rank(*config, options);
      break;
    case proto::ROLE_PUBLISHER:
      status = run_publisher_rank(*config, options);
      break;
    case proto::ROLE_SUBSCRIBER:
      status = run_subscriber_rank(*config, options);
      break;
    default:
      status = invalid_argument("rank " + std::to_string(rank) + " has no runnable role");
  }
  if (!status.ok()) {
    spdlog::error("{}", status.to_string());
    return 1;
  }
  spdlog::info("stopped cleanly{}", g_signal ? " (signal " + std::to_string(g_signal) + ")" : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Library code reports failures as Status; this is the boundary for anything that still
  // throws (an allocation in a dependency, a std::system_error from a thread start).
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weightcastd: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "weightcastd: error: an unknown exception\n");
  }
  return 1;
}
