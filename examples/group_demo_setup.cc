#include "examples/group_demo_setup.h"

#include <filesystem>

#include "src/control/group_init.h"

namespace weightcast::demo {
namespace {

constexpr size_t kMaxUnixSocketPath = 100;  // sockaddr_un's sun_path holds 108 with its NUL

}  // namespace

Result<DemoGroup> prepare_demo_group(const DemoArgs& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  DemoGroup g;
  g.state_dir = args.work_dir + "/ranks";
  // A previous demo's journal and rank state would make this one continue from it.
  fs::remove_all(args.work_dir + "/journal", ec);
  fs::remove_all(g.state_dir, ec);
  if (!args.figures_path.empty()) fs::remove(args.figures_path, ec);  // appended to per run
  g.subscriber_ranks = args.subscribers + (args.late_joiner ? 1 : 0);

  GroupInitOptions o;
  o.dir = args.work_dir;
  o.group_id = "demo";
  o.publishers = args.publishers;
  g.publishers = args.publishers;
  g.first_subscriber = 1 + args.publishers;
  o.subscribers = g.subscriber_ranks;
  if (args.port) {
    o.endpoint = "tcp://127.0.0.1:" + std::to_string(args.port);
  } else {
    // Every rank runs on this host: a unix socket in the work directory, so no port is chosen
    // and then left free for another process to take before the coordinator binds it. A path
    // too long for a unix socket (sockaddr_un) falls back to a free loopback port.
    const std::string sock =
        fs::absolute(args.work_dir, ec).lexically_normal().string() + "/coordinator.sock";
    if (!ec && sock.size() < kMaxUnixSocketPath) o.endpoint = "ipc://" + sock;
  }
  o.anchor_every = args.anchor_every;
  o.demo_parameters = args.parameters;
  o.demo_density = args.density;
  o.demo_versions = args.versions;
  o.demo_step_interval_ms = args.step_interval_ms;
  o.demo_publisher_mode = args.publisher_mode;
  o.fp8 = args.fp8;
  o.tensor_parallel = args.tensor_parallel;
  o.whole_subscribers = args.whole_subscribers;
  o.demo_figures_path = args.figures_path;
  o.transports = args.transports;
  o.ucx_tls = args.ucx_tls;
  o.ucx_publisher_memory = args.ucx_publisher_memory;
  o.overwrite = true;
  ASSIGN_OR_RETURN(GroupInitResult r, init_group(o));
  g.config_path = r.config_path;
  g.journal_root = r.journal_root;
  return g;
}

}  // namespace weightcast::demo
