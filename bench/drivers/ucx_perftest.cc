#include "bench/drivers/ucx_perftest.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace weightcast {
namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text() {
  return std::strerror(errno);
}

// A spawned process, SIGKILLed and reaped on destruction unless wait() reaped it first.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // argv[0] is the program; the environment is this process's with UCX_TLS replaced.
  Status spawn(const std::vector<std::string>& argv, const std::string& tls,
               posix_spawn_file_actions_t* actions) {
    std::vector<std::string> env_strings{"UCX_TLS=" + tls};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "UCX_TLS=", 8) != 0) env_strings.emplace_back(*e);
    }
    std::vector<char*> args, env;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    for (const auto& e : env_strings) env.push_back(const_cast<char*>(e.c_str()));
    args.push_back(nullptr);
    env.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, argv[0].c_str(), actions, nullptr, args.data(), env.data());
    if (rc != 0) {
      pid_ = -1;
      return io_error("cannot start " + argv[0] + ": " + std::strerror(rc));
    }
    return ok_status();
  }

  pid_t pid() const { return pid_; }

  // The exit status once the process has ended; nullopt while it runs.
  std::optional<int> poll_exit() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::optional<int> wait_until(Clock::time_point deadline) {
    while (true) {
      if (auto s = poll_exit()) return s;
      if (Clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  pid_t pid_ = -1;
};

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string tail(const std::string& text, size_t max_chars = 1500) {
  return text.size() <= max_chars ? text : "..." + text.substr(text.size() - max_chars);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A TCP port nobody listens on right now (the kernel's pick for an ephemeral bind).
Result<int> free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error("socket for a free port: " + errno_text());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status s = io_error("bind to 127.0.0.1:0 for a free port: " + errno_text());
    ::close(fd);
    return s;
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// Whether some socket listens on `port` in the network namespace of process `pid`
// (/proc/PID/net/tcp{,6}, state 0A). Probing by connecting would use up the perftest server's
// single accept.
bool port_listening(int port, pid_t pid) {
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  const std::string net = "/proc/" + std::to_string(pid) + "/net/";
  for (const std::string& table : {net + "tcp", net + "tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state == "0A" && local.size() > 5 && local.ends_with(want)) return true;
    }
  }
  return false;
}

// Runs argv to completion, returning its exit status and stdout+stderr; kills it when the
// deadline passes.
Result<std::pair<int, std::string>> run_captured(const std::vector<std::string>& argv,
                                                 const std::string& tls,
                                                 Clock::time_point deadline) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return io_error("pipe for " + argv[0] + ": " + errno_text());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  Child child;
  Status started = child.spawn(argv, tls, &actions);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  while (started.ok()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      ::close(fds[0]);
      return deadline_exceeded("'" + join(argv) +
                               "' did not finish in time; its output: " + tail(out));
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000))) < 0 && errno != EINTR) {
      started = io_error("poll on the output of " + argv[0] + ": " + errno_text());
      break;
    }
    char buf[4096];
    const ssize_t n = (p.revents != 0) ? ::read(fds[0], buf, sizeof buf) : -1;
    if (n == 0) break;  // EOF: the process closed its output
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  RETURN_IF_ERROR(started);
  auto status = child.wait_until(deadline);
  if (!status) return deadline_exceeded("'" + join(argv) + "' did not exit in time");
  return std::make_pair(*status, std::move(out));
}

// The first executable `name` on PATH, then in /usr/sbin and /sbin (where iproute2 puts
// `ip`, often off a user's PATH). kNotFound names the Debian package that provides it.
Result<std::string> find_program(const std::string& name, const std::string& package) {
  const char* env_path = std::getenv("PATH");
  std::istringstream dirs(
      std::string(env_path != nullptr ? env_path : "/usr/local/bin:/usr/bin:/bin") +
      ":/usr/sbin:/sbin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return not_found(name + " is not on PATH; it comes with " + package +
                   " (Debian/Ubuntu: apt-get install " + package + ")");
}

}  // namespace

Result<std::string> find_ucx_perftest(const std::string& path) {
  if (!path.empty()) {
    if (::access(path.c_str(), X_OK) != 0) {
      return not_found("ucx_perftest at '" + path + "' is not an executable file: " + errno_text());
    }
    return path;
  }
  auto found = find_program("ucx_perftest", "ucx-utils");
  if (!found.ok()) {
    return not_found(found.status().message() + ", or pass its path with --perftest");
  }
  return found;
}

Status enter_network_namespace(const std::string& name) {
  if (name.empty()) return ok_status();
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    return invalid_argument("network namespace '" + name + "' is not a name of /var/run/netns");
  }
  const std::string path = "/var/run/netns/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("network namespace " + path + ": " + errno_text());
  const int rc = ::setns(fd, CLONE_NEWNET);
  const std::string why = errno_text();
  ::close(fd);
  if (rc != 0) return io_error("cannot enter network namespace " + path + ": " + why);
  return ok_status();
}

Result<double> parse_perftest_gbps(const std::string& output, uint64_t bytes) {
  std::istringstream lines(output);
  std::string line, final_line;
  while (std::getline(lines, line)) {
    const size_t at = line.find_first_not_of(" \t|");
    if (at != std::string::npos && line.compare(at, 6, "Final:") == 0) final_line = line;
  }
  if (final_line.empty()) {
    return data_loss("ucx_perftest printed no 'Final:' line; its output: " + tail(output));
  }
  // Final: iterations, latency 50 %ile / average / overall (usec), bandwidth average / overall
  // (MB/s), message rate average / overall. The "average" columns cover the last report
  // interval only and may read "inf" or 0 when it was empty; the overall ones are used.
  std::istringstream fields(final_line.substr(final_line.find("Final:") + 6));
  std::vector<double> v;
  std::string field;
  while (fields >> field) {
    char* end = nullptr;
    const double x = std::strtod(field.c_str(), &end);
    if (end == field.c_str() || *end != '\0') break;
    v.push_back(x);
  }
  if (v.size() < 8 || !std::isfinite(v[3]) || !std::isfinite(v[5]) || v[3] <= 0 || v[5] <= 0) {
    return data_loss("cannot read the bandwidth of ucx_perftest's line '" + final_line +
                     "' (expected 8 numbers: iterations, 3 latencies, 2 bandwidths, 2 rates)");
  }
  const double mib_per_s = v[5];
  const double expected_mib = static_cast<double>(bytes) / (v[3] * 1e-6) / 1048576.0;
  if (std::abs(mib_per_s - expected_mib) > 0.03 * expected_mib + 0.05) {
    char why[160];
    std::snprintf(why, sizeof why, " (%.2f) is not %llu bytes / %.3f us in MiB/s (%.2f)", mib_per_s,
                  static_cast<unsigned long long>(bytes), v[3], expected_mib);
    return data_loss("the overall bandwidth on ucx_perftest's line '" + final_line + "'" + why +
                     ": its unit or layout changed");
  }
  return mib_per_s * 1048576.0 / 1e9;
}

Result<double> run_ucx_perftest(const std::string& perftest, const PerftestRun& run,
                                const std::string& scratch_dir, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  ASSIGN_OR_RETURN(const int port, free_port());
  std::vector<std::string> server_argv{perftest, "-p", std::to_string(port)};
  if (!run.server_netns.empty()) {
    ASSIGN_OR_RETURN(const std::string ip, find_program("ip", "iproute2"));
    server_argv.insert(server_argv.begin(), {ip, "netns", "exec", run.server_netns});
  }
  const std::string server_log = scratch_dir + "/perftest-server-" + std::to_string(port) + ".txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, server_log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  Child server;
  Status started = server.spawn(server_argv, run.tls, &actions);
  posix_spawn_file_actions_destroy(&actions);
  RETURN_IF_ERROR(started);
  const std::string server_what = "UCX_TLS=" + run.tls + " " + join(server_argv);
  while (!port_listening(port, server.pid())) {
    if (auto status = server.poll_exit()) {
      return io_error("'" + server_what + "' exited with status " + std::to_string(*status) +
                      " before listening; its output: " + tail(read_text(server_log)));
    }
    if (Clock::now() > deadline) {
      return deadline_exceeded("'" + server_what + "' did not listen on port " +
                               std::to_string(port) + " in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::vector<std::string> client_argv{perftest, run.server_address,
                                             "-p",     std::to_string(port),
                                             "-t",     "ucp_get",
                                             "-s",     std::to_string(run.bytes),
                                             "-n",     std::to_string(run.iterations),
                                             "-w",     std::to_string(run.warmup)};
  const std::string client_what = "UCX_TLS=" + run.tls + " " + join(client_argv);
  ASSIGN_OR_RETURN(auto client, run_captured(client_argv, run.tls, deadline));
  if (client.first != 0) {
    return io_error("'" + client_what + "' exited with status " + std::to_string(client.first) +
                    "; its output: " + tail(client.second) +
                    "; the server's: " + tail(read_text(server_log)));
  }
  auto gbps = parse_perftest_gbps(client.second, run.bytes);
  if (!gbps.ok()) return gbps.status().with_context(client_what);
  // The server exits on its own once the client has finished; ~Child kills it otherwise.
  (void)server.wait_until(std::min(deadline, Clock::now() + std::chrono::seconds(10)));
  std::remove(server_log.c_str());
  return gbps;
}

}  // namespace weightcast
