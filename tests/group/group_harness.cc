#include "tests/group/group_harness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "src/control/curve_keys.h"
#include "src/control/group_config.h"
#include "src/control/listen_socket.h"

namespace weightcast::testing {

std::string weightcastd_path() {
  return WEIGHTCASTD_PATH;
}

TestGroup::TestGroup(const GroupSpec& spec) : publishers_(spec.publishers) {
  std::string pattern = (std::filesystem::temp_directory_path() / "wc_group.XXXXXX").string();
  dir_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  config_path_ = dir_ + "/group.yaml";
  auto listener = listen_on_loopback();
  if (!listener.ok()) ADD_FAILURE() << listener.status().to_string();
  const uint16_t port = listener.ok() ? listener->port : 0;
  listen_fd_ = listener.ok() ? listener->fd : -1;
  std::ostringstream y;
  y << "group_id: test\ncoordinator: {endpoint: \"tcp://127.0.0.1:" << port << "\"}\n"
    << "journal: {root: journal, anchor_every: " << spec.anchor_every << ", retain_anchors: 2}\n"
    << "transports: " << spec.transports << "\nmax_in_flight: " << spec.max_in_flight << "\n"
    << "timeouts: {heartbeat_ms: " << spec.heartbeat_ms << ", dead_after_ms: " << spec.dead_after_ms
    << ", ack_timeout_ms: " << spec.ack_timeout_ms << ", lease_ttl_ms: " << spec.lease_ttl_ms
    << "}\n"
    << "demo: {parameters: " << spec.parameters << ", density: " << spec.density
    << ", versions: " << spec.versions << ", seed: 3, step_interval_ms: " << spec.step_interval_ms
    << "}\n";
  if (!spec.ucx_tls.empty() || !spec.ucx_publisher_memory.empty()) {
    y << "ucx: {";
    if (!spec.ucx_tls.empty()) y << "tls: \"" << spec.ucx_tls << "\"";
    if (!spec.ucx_tls.empty() && !spec.ucx_publisher_memory.empty()) y << ", ";
    if (!spec.ucx_publisher_memory.empty()) y << "publisher_memory: " << spec.ucx_publisher_memory;
    y << "}\n";
  }
  if (spec.nccl_timeout_ms) y << "nccl: {timeout_ms: " << spec.nccl_timeout_ms << "}\n";
  y << spec.extra_yaml;
  std::vector<CurveKeyPair> keys;
  if (spec.curve) {
    std::filesystem::create_directories(dir_ + "/keys");
    for (uint32_t r = 0; r < 1 + spec.publishers + spec.subscribers; ++r) {
      keys.push_back(generate_curve_key_pair().value());
      (void)write_curve_key_file(dir_ + "/keys/rank" + std::to_string(r) + ".key", keys.back());
    }
    auto observer = generate_curve_key_pair().value();
    (void)write_curve_key_file(dir_ + "/keys/observer.key", observer);
    y << "curve: {enabled: true, coordinator_public_key: \"" << keys[0].public_z85
      << "\", coordinator_key_file: keys/rank0.key, observer_key_file: keys/observer.key}\n";
  }
  y << "ranks:\n";
  const uint32_t first_subscriber = 1 + spec.publishers;
  for (uint32_t r = 0; r < first_subscriber + spec.subscribers; ++r) {
    y << "  - {rank: " << r << ", role: "
      << (r == 0                 ? "coordinator"
          : r < first_subscriber ? "publisher"
                                 : "subscriber");
    if (spec.curve) {
      y << ", key_file: keys/rank" << r << ".key, public_key: \"" << keys[r].public_z85 << "\"";
    }
    if (r >= first_subscriber && r - first_subscriber < spec.subscriber_fields.size()) {
      y << ", " << spec.subscriber_fields[r - first_subscriber];
    }
    y << "}\n";
  }
  yaml_ = y.str();
  std::ofstream(config_path_) << yaml_;
  config_ = load_group_config(config_path_).value();
}

TestGroup::~TestGroup() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  std::error_code ec;
  if (!dir_.empty() && !std::getenv("WEIGHTCAST_KEEP_TEST_DIRS")) {
    std::filesystem::remove_all(dir_, ec);
  }
}

std::vector<std::string> TestGroup::coordinator_args() const {
  return {"--listen-fd", std::to_string(listen_fd_)};
}

std::string TestGroup::write_config_variant(const std::string& name,
                                            const std::string& yaml) const {
  const std::string path = dir_ + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

RankProcess::RankProcess(const std::string& config_path, uint32_t rank, const std::string& log_path,
                         std::vector<std::string> extra_args)
    : log_path_(log_path) {
  std::vector<std::string> args{weightcastd_path(),   "--config",  config_path, "--rank",
                                std::to_string(rank), "--threads", "1"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  int inherited_fd = -1;
  for (size_t i = 0; i + 1 < extra_args.size(); ++i) {
    if (extra_args[i] == "--listen-fd") inherited_fd = std::stoi(extra_args[i + 1]);
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    if (inherited_fd >= 0) ::fcntl(inherited_fd, F_SETFD, 0);  // survives the exec below
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
}

RankProcess::~RankProcess() {
  if (pid_ > 0 && !exit_) {
    ::kill(pid_, SIGKILL);
    (void)wait_exit(std::chrono::seconds(10));
  }
}

void RankProcess::signal(int sig) const {
  if (pid_ > 0 && !exit_) ::kill(pid_, sig);
}

std::optional<int> RankProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_) return exit_;
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

std::string RankProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

CoordinatorThread::CoordinatorThread(const TestGroup& group)
    : CoordinatorThread(group.config(), group.listen_fd()) {}

CoordinatorThread::CoordinatorThread(const proto::GroupConfig& config, int listen_fd) {
  CoordinatorOptions options;
  // The coordinator closes the socket it serves; the group keeps its own for restarts.
  options.listen_fd = listen_fd >= 0 ? ::fcntl(listen_fd, F_DUPFD_CLOEXEC, 0) : -1;
  auto c = Coordinator::start(config, options);
  if (!c.ok()) {
    error_ = c.status().to_string();
    return;
  }
  coordinator_ = std::move(c).value();
  thread_ = std::thread([this] {
    Status s = coordinator_->run(stop_);
    if (!s.ok()) error_ = s.to_string();
  });
}

void CoordinatorThread::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  coordinator_.reset();
}

CoordinatorThread::~CoordinatorThread() {
  stop();
}

bool eventually(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return predicate();
}

std::optional<proto::StatusReply> group_status(const proto::GroupConfig& config) {
  auto s = query_group_status(config, "", std::chrono::milliseconds(1000));
  if (!s.ok()) return std::nullopt;
  return *s;
}

const proto::MemberStatus* member(const proto::StatusReply& status, uint32_t rank) {
  for (const auto& m : status.members()) {
    if (m.rank() == rank) return &m;
  }
  return nullptr;
}

std::string bad_results(const proto::StatusReply& status) {
  std::string out;
  for (const auto& v : status.versions()) {
    for (const auto& r : v.results()) {
      if (r.result() == "mismatch" || r.result() == "nack") {
        out += "rank " + std::to_string(r.rank()) + " " + r.result() + " on v" +
               std::to_string(v.version()) + "; ";
      }
    }
  }
  return out;
}

bool stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T';
}

bool all_at(const TestGroup& group, uint32_t subscribers, uint64_t version) {
  auto s = group_status(group.config());
  if (!s || !s->has_committed() || s->committed_version() < version) return false;
  for (uint32_t i = 0; i < subscribers; ++i) {
    const auto* m = member(*s, group.subscriber_rank(i));
    if (!m || m->state() != "live" || !m->holds_version() || m->held_version() != version) {
      return false;
    }
  }
  return true;
}

}  // namespace weightcast::testing
