// The weightcast binary killed (SIGKILL) while it writes a file a user named, at the fault
// points of src/cli/delta_commands.cc (docs/DECISIONS.md "Fault points"): `delta apply` killed
// after the new content was verified in memory and before the first byte of the target was
// written leaves the target exactly as it was; `delta encode` killed with the whole delta in
// its temp file and before the rename leaves the old output (or none), never part of the new
// one. In both, the next run of the command removes what the dead process left, succeeds and
// writes the right bytes.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/service/run_command.h"
#include "tests/transport/user_file_test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using weightcast::testing::CommandResult;
using weightcast::testing::run_cli_within;
using weightcast::testing_util::contents;
using weightcast::testing_util::inode_of;
using weightcast::testing_util::put;

constexpr int kDeadlineS = 30;

// The CLI run with WEIGHTCAST_STOP_AT=`stop_at` (transport/fault_point.h), its stdout and
// stderr in `log`. The destructor kills and reaps a child still there, so a failing test leaves
// no stopped process behind.
class StoppableCli {
 public:
  StoppableCli(const std::string& stop_at, const std::vector<std::string>& args,
               const std::string& log)
      : log_(log) {
    // Everything the child needs is built here: after fork it only opens, dups and execs.
    std::vector<std::string> env_strings{"WEIGHTCAST_STOP_AT=" + stop_at};
    for (char** e = environ; *e != nullptr; ++e) {
      if (!std::string(*e).starts_with("WEIGHTCAST_STOP_AT=")) env_strings.emplace_back(*e);
    }
    std::vector<std::string> arg_strings{WEIGHTCAST_CLI_PATH};
    arg_strings.insert(arg_strings.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& a : arg_strings) argv.push_back(a.data());
    for (auto& e : env_strings) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
  }
  ~StoppableCli() {
    if (pid_ > 0 && !reaped_) kill_now();
  }
  StoppableCli(const StoppableCli&) = delete;
  StoppableCli& operator=(const StoppableCli&) = delete;

  pid_t pid() const { return pid_; }
  // The exit code once wait_stopped saw the child exit (-1: not exited, or killed).
  int exit_code() const { return exit_code_; }
  std::string log() const { return contents(log_); }

  // True once the child stopped itself at its fault point; false when it exited (it never
  // reached the point) or was still running at the deadline.
  bool wait_stopped(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WUNTRACED | WNOHANG);
      if (r == pid_ && WIFSTOPPED(status)) return true;
      if (r == pid_ || r < 0) {
        reaped_ = true;
        exit_code_ = r == pid_ && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // SIGKILL, then reaps the child; true when the kill is what ended it.
  bool kill_now() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    reaped_ = ::waitpid(pid_, &status, 0) == pid_;
    return reaped_ && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
};

class CliInterruptedWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-interrupted-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    logs_ = dir_ + "-logs";
    fs::create_directory(logs_);
    old_.resize(2 * 20000);
    for (size_t i = 0; i < old_.size(); ++i) old_[i] = static_cast<char>(i * 7 + i / 13);
    new_ = old_;
    for (size_t i = 0; i < new_.size(); i += 2 * 37) new_[i] = static_cast<char>(new_[i] + 3);
    put(p("old.bin"), old_);
    put(p("new.bin"), new_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(logs_);
  }
  std::string p(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> encode_args(const std::string& out) const {
    return {"delta",     "encode", "--old", p("old.bin"), "--new",          p("new.bin"),
            "--version", "3",      "-o",    out,          "--base-version", "2"};
  }
  static std::string joined(const std::vector<std::string>& args) {
    std::string s;
    for (const auto& a : args) s += a + " ";
    return s;
  }
  // The names in the test directory.
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.insert(e.path().filename().string());
    return out;
  }

  std::string dir_, logs_, old_, new_;
};

TEST_F(CliInterruptedWrite, ApplyKilledAfterVerifyingInMemoryLeavesTheTargetAsItWas) {
  const CommandResult enc = run_cli_within(kDeadlineS, joined(encode_args(p("d.wcd"))));
  ASSERT_EQ(enc.exit_code, 0) << enc.output;
  put(p("model.bin"), old_);
  const ino_t inode = inode_of(p("model.bin"));
  const std::set<std::string> before = names();
  const std::vector<std::string> apply = {"delta",    "apply",    "--delta",
                                          p("d.wcd"), "--target", p("model.bin")};
  {
    StoppableCli cli("delta_apply.verified:3", apply, logs_ + "/apply.log");
    ASSERT_TRUE(cli.wait_stopped(std::chrono::seconds(kDeadlineS)))
        << "delta apply never reached delta_apply.verified:3\n"
        << cli.log();
    EXPECT_NE(cli.log().find("stopping at fault point delta_apply.verified:3"), std::string::npos)
        << cli.log();
    EXPECT_TRUE(contents(p("model.bin")) == old_) << "written before the point";
    ASSERT_TRUE(cli.kill_now());
  }
  EXPECT_TRUE(contents(p("model.bin")) == old_) << "the killed apply changed the target";
  EXPECT_EQ(inode_of(p("model.bin")), inode);
  EXPECT_EQ(names(), before) << "the killed apply left a file behind";

  const CommandResult again = run_cli_within(kDeadlineS, joined(apply));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contents(p("model.bin")) == new_);
  EXPECT_EQ(inode_of(p("model.bin")), inode);
  EXPECT_EQ(names(), before);
}

// Killed before the rename, over an existing output and where there is none yet.
TEST_F(CliInterruptedWrite, EncodeKilledBeforeTheRenameLeavesTheOldOutputOrNone) {
  const CommandResult ref = run_cli_within(kDeadlineS, joined(encode_args(p("ref.wcd"))));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const std::string want = contents(p("ref.wcd"));
  ASSERT_GT(want.size(), 16u);
  for (const bool existing : {true, false}) {
    SCOPED_TRACE(existing ? "over an existing output" : "no output yet");
    const std::string out = p("d.wcd");
    const std::string previous = "the previous delta, shorter than the new one";
    if (existing) put(out, previous);
    const std::set<std::string> before = names();
    pid_t killed = 0;
    {
      StoppableCli cli("delta_encode.temp_written:3", encode_args(out), logs_ + "/encode.log");
      ASSERT_TRUE(cli.wait_stopped(std::chrono::seconds(kDeadlineS)))
          << "delta encode never reached delta_encode.temp_written:3\n"
          << cli.log();
      killed = cli.pid();
      // Stopped: the whole delta is in the temp file, the output untouched.
      const std::string temp = p(".d.wcd.wctmp." + std::to_string(killed) + ".0");
      EXPECT_TRUE(contents(temp) == want) << temp;
      ASSERT_TRUE(cli.kill_now());
    }
    if (existing) {
      EXPECT_TRUE(contents(out) == previous) << "the killed encode changed the old output";
    } else {
      EXPECT_FALSE(fs::exists(out)) << "the killed encode left an output";
    }
    // The dead process's temp file is all it left, until the next run.
    std::set<std::string> left = names();
    EXPECT_EQ(left.erase(".d.wcd.wctmp." + std::to_string(killed) + ".0"), 1u);
    EXPECT_EQ(left, before);

    const CommandResult again = run_cli_within(kDeadlineS, joined(encode_args(out)));
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_TRUE(contents(out) == want);
    std::set<std::string> after = before;
    after.insert("d.wcd");
    EXPECT_EQ(names(), after) << "a temp file outlived the next run";
    fs::remove(out);
  }
}

// The point stops only the version it names: any other runs through and writes its output.
TEST_F(CliInterruptedWrite, APointNamingAnotherVersionDoesNotStop) {
  StoppableCli cli("delta_encode.temp_written:4", encode_args(p("d.wcd")), logs_ + "/other.log");
  EXPECT_FALSE(cli.wait_stopped(std::chrono::seconds(kDeadlineS))) << cli.log();
  EXPECT_EQ(cli.exit_code(), 0) << cli.log();
  const CommandResult ref = run_cli_within(kDeadlineS, joined(encode_args(p("ref.wcd"))));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  EXPECT_TRUE(contents(p("d.wcd")) == contents(p("ref.wcd")));
}

}  // namespace
