// Helpers of the rank group tests: a temp group (config, keys, a bound loopback port), ranks as
// real weightcastd processes (fork + exec, killed with any signal), an in-process coordinator
// thread, and bounded waits.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/control/coordinator.h"
#include "src/control/group_status.h"
#include "weightcast/group_config.pb.h"

namespace weightcast::testing {

struct GroupSpec {
  uint32_t subscribers = 2;
  uint32_t publishers = 1;  // ranks 1..publishers; several publish shards (shard_publisher.h)
  bool curve = false;
  uint64_t parameters = 200000;  // the demo model a weightcastd publisher publishes
  double density = 0.01;
  uint64_t versions = 6;
  uint32_t step_interval_ms = 0;
  uint64_t anchor_every = 5;
  uint32_t heartbeat_ms = 100;
  uint32_t dead_after_ms = 3000;  // 30 heartbeats: no live rank dropped on a loaded machine
  uint32_t ack_timeout_ms = 20000;
  uint32_t lease_ttl_ms = 60000;
  uint32_t max_in_flight = 2;
  std::string transports = "[fs]";   // YAML list, in preference order
  std::string ucx_tls;               // the ucx.tls field when not empty
  std::string ucx_publisher_memory;  // the ucx.publisher_memory field when not empty
  uint32_t nccl_timeout_ms = 0;      // the nccl.timeout_ms field when not 0
  std::string extra_yaml;            // appended to the config as it is (e.g. an fp8 section)
  // More fields of subscriber i's rank entry ("layout: tp2, part: 0, replica: e0").
  std::vector<std::string> subscriber_fields;
};

// A group in a fresh temp directory: rank 0 coordinator, 1.. publishers, then subscribers.
class TestGroup {
 public:
  explicit TestGroup(const GroupSpec& spec);
  ~TestGroup();
  TestGroup(const TestGroup&) = delete;
  TestGroup& operator=(const TestGroup&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& config_path() const { return config_path_; }
  const proto::GroupConfig& config() const { return config_; }
  std::string journal() const { return dir_ + "/journal"; }
  uint32_t subscriber_rank(uint32_t i) const { return 1 + publishers_ + i; }

  // Rewrites group.yaml with `extra` appended to the YAML (tests of bad configs).
  std::string write_config_variant(const std::string& name, const std::string& yaml) const;
  // The YAML text of the config.
  const std::string& yaml() const { return yaml_; }

  // The coordinator's listening socket, bound to the config's port once for the whole test
  // and kept open (a restarted coordinator serves the same socket; no other process can
  // take the port in between). Pass coordinator_args() to a rank 0 RankProcess;
  // CoordinatorThread(const TestGroup&) hands a duplicate to its coordinator.
  int listen_fd() const { return listen_fd_; }
  std::vector<std::string> coordinator_args() const;

 private:
  std::string dir_;
  std::string config_path_;
  std::string yaml_;
  proto::GroupConfig config_;
  int listen_fd_ = -1;
  uint32_t publishers_ = 1;
};

// One weightcastd process; killed with SIGKILL on destruction if still running. The fd
// after a "--listen-fd" in `extra_args` is kept open across exec for it.
class RankProcess {
 public:
  RankProcess(const std::string& config_path, uint32_t rank, const std::string& log_path,
              std::vector<std::string> extra_args = {});
  ~RankProcess();
  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Exit status (or 128 + signal) once the process ended, nullopt at the timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  std::string log() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  std::optional<int> exit_;
};

// A Coordinator served by a thread of the test process.
class CoordinatorThread {
 public:
  // Serves `config`; with `listen_fd` >= 0, a duplicate of that listening socket.
  explicit CoordinatorThread(const proto::GroupConfig& config, int listen_fd = -1);
  // Serves the group's config on its listening socket.
  explicit CoordinatorThread(const TestGroup& group);
  ~CoordinatorThread();
  bool ok() const { return coordinator_ != nullptr; }
  const std::string& error() const { return error_; }
  void stop();

 private:
  std::unique_ptr<Coordinator> coordinator_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::string error_;
};

// Polls `predicate` every 20 ms until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& predicate, std::chrono::milliseconds timeout);

// The coordinator's status (nullopt when it does not answer within a second).
std::optional<proto::StatusReply> group_status(const proto::GroupConfig& config);

// The member of `rank` in `status`, when present.
const proto::MemberStatus* member(const proto::StatusReply& status, uint32_t rank);

// Every subscriber result recorded in `status` (rank, version, result) that is "mismatch"
// or "nack", as text; empty when none.
std::string bad_results(const proto::StatusReply& status);

std::string weightcastd_path();

// Whether process `pid` is stopped (state T in /proc/PID/stat): it reached its fault point
// (transport/fault_point.h).
bool stopped(pid_t pid);

// Every one of the first `subscribers` subscribers of `group` holds `version`, live, and the
// group committed it.
bool all_at(const TestGroup& group, uint32_t subscribers, uint64_t version);

}  // namespace weightcast::testing
