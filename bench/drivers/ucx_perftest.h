// The reference side of `weightcast bench ucx` (bench/drivers/ucx_benchmark.h): UCX's own
// ucx_perftest (Debian/Ubuntu package ucx-utils) run as a server and a client process on loopback
// with
// `-t ucp_get`, and the bandwidth it prints, read back in GB/s (decimal).
//
// Units: ucx_perftest labels its bandwidth "MB/s" but divides by 2^20 (its MB is
// pow(1024, 2)); parse_perftest_gbps checks that against bytes / overall latency on the same
// line and refuses a line where the two disagree, so a future change of unit fails loudly
// instead of skewing every ratio.
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"

namespace weightcast {

// `path` when it is given (it must be executable), otherwise the first ucx_perftest on PATH.
// kNotFound names the package that provides it.
Result<std::string> find_ucx_perftest(const std::string& path);

struct PerftestRun {
  std::string tls;  // UCX_TLS for both processes, e.g. "shm" or "tcp"
  uint64_t bytes = 0;
  uint64_t iterations = 0;  // -n: timed gets
  uint64_t warmup = 0;      // -w: untimed gets first
  // The server's network namespace (run through `ip netns exec`) and the address the client
  // connects to; empty and 127.0.0.1: both on loopback here.
  std::string server_netns;
  std::string server_address = "127.0.0.1";
};

// Moves the calling thread (in a freshly forked child: the process) into the network
// namespace `name` of /var/run/netns; nothing when `name` is empty. Errors name the namespace.
Status enter_network_namespace(const std::string& name);

// The overall bandwidth of the "Final:" line of a ucx_perftest client's output, in GB/s
// (1e9 bytes per second). kDataLoss quotes the line (or the output's tail) it cannot read.
Result<double> parse_perftest_gbps(const std::string& output, uint64_t bytes);

// Starts `perftest` as a server on a free port (UCX_TLS=run.tls; in run.server_netns if set),
// waits until it listens, runs the client against run.server_address and returns its
// bandwidth in GB/s. The server's output
// goes to a file in `scratch_dir` (quoted when it fails). Both processes are killed on any
// error or when `timeout_s` passes; errors name the command line and quote its output.
Result<double> run_ucx_perftest(const std::string& perftest, const PerftestRun& run,
                                const std::string& scratch_dir, int timeout_s = 120);

}  // namespace weightcast
