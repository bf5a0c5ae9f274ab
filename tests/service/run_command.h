// Runs a command line as a user would and captures what it printed (stdout and stderr).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>

namespace weightcast::testing {

struct CommandResult {
  int exit_code;       // -1 when the command did not exit normally
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, std::move(out)};
}

// The command exited with an error of its own, rather than being killed at a deadline
// (run_cli_within's SIGKILL reads as 137).
inline bool refused(const CommandResult& r) {
  return r.exit_code > 0 && r.exit_code != 137;
}

// What the command printed contains `text`.
inline bool has(const CommandResult& r, const std::string& text) {
  return r.output.find(text) != std::string::npos;
}

// The weightcast CLI built with the tests.
inline CommandResult run_cli(const std::string& args) {
  return run_command(std::string(WEIGHTCAST_CLI_PATH) + " " + args);
}

// The CLI under a deadline, for commands that could block (a FIFO given as a file): one still
// running after `seconds` is killed with SIGKILL and reads as exit code 137, so a hang fails the
// test instead of blocking the suite.
inline CommandResult run_cli_within(int seconds, const std::string& args) {
  return run_command("timeout -s KILL " + std::to_string(seconds) + " " +
                     std::string(WEIGHTCAST_CLI_PATH) + " " + args);
}

}  // namespace weightcast::testing
