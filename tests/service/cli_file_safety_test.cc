// What `weightcast delta encode|apply|inspect` do with the files a user names when they are
// not plain files: symlinks and hard links (followed and kept), read-only files and FIFOs
// (refused, never blocked on), outputs that are inputs (refused), symlink loops (named).
// Every command that could block runs under a deadline (run_cli_within).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/service/run_command.h"
#include "tests/transport/user_file_test_util.h"

namespace {

namespace fs = std::filesystem;
using weightcast::testing::CommandResult;
using weightcast::testing::has;
using weightcast::testing::refused;
using weightcast::testing::run_cli_within;
using weightcast::testing_util::contents;
using weightcast::testing_util::inode_of;
using weightcast::testing_util::mode_of;
using weightcast::testing_util::put;

constexpr int kDeadlineS = 20;  // a FIFO that blocks reads as exit code 137

class CliFileSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-file-safety-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    old_.assign(2 * 4096, 'a');
    new_ = old_;
    for (size_t i = 0; i < new_.size(); i += 2 * 61) new_[i] = 'b';
    put(p("old.bin"), old_);
    put(p("new.bin"), new_);
    const CommandResult enc =
        cli("delta encode --old " + p("old.bin") + " --new " + p("new.bin") + " -o " + p("d.wcd"));
    ASSERT_EQ(enc.exit_code, 0) << enc.output;
    delta_ = contents(p("d.wcd"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return dir_ + "/" + name; }
  static CommandResult cli(const std::string& args) { return run_cli_within(kDeadlineS, args); }
  CommandResult apply(const std::string& target, const std::string& delta = "") const {
    return cli("delta apply --delta " + (delta.empty() ? p("d.wcd") : delta) + " --target " +
               target);
  }
  CommandResult encode_to(const std::string& out) const {
    return cli("delta encode --old " + p("old.bin") + " --new " + p("new.bin") + " -o " + out);
  }

  std::string dir_, old_, new_, delta_;
};

// The symlink used to be replaced by a regular file holding the new version, while the file
// it pointed to kept the old one (and the command reported success).
TEST_F(CliFileSafety, ApplyThroughASymlinkUpdatesTheRealFileAndKeepsTheLink) {
  fs::create_symlink("old.bin", p("model-link.bin"));
  const CommandResult r = apply(p("model-link.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(p("model-link.bin")));
  EXPECT_EQ(contents(p("old.bin")), new_);
}

TEST_F(CliFileSafety, ApplyKeepsTheInodeHardLinksAndMode) {
  ASSERT_EQ(::chmod(p("old.bin").c_str(), 0640), 0);
  ASSERT_EQ(::link(p("old.bin").c_str(), p("hard.bin").c_str()), 0);
  const ino_t before = inode_of(p("old.bin"));
  const CommandResult r = apply(p("old.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(inode_of(p("old.bin")), before);
  EXPECT_EQ(contents(p("hard.bin")), new_);
  EXPECT_EQ(mode_of(p("old.bin")), 0640u);
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

// A run killed mid-write used to leave its full-size `.old.bin.tmp.<pid>` for good.
TEST_F(CliFileSafety, ApplyRemovesTempsOfKilledRuns) {
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string legacy = p(".old.bin.tmp." + std::to_string(dead));
  const std::string current = p(".old.bin.wctmp." + std::to_string(dead) + ".0");
  put(legacy, old_);
  put(current, old_);
  const CommandResult r = apply(p("old.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_FALSE(fs::exists(current));
  EXPECT_EQ(contents(p("old.bin")), new_);
}

TEST_F(CliFileSafety, ApplyRefusesAReadOnlyTarget) {
  ASSERT_EQ(::chmod(p("old.bin").c_str(), 0444), 0);
  const CommandResult r = apply(p("old.bin"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r, "'" + p("old.bin") + "' is read-only")) << r.output;
  EXPECT_EQ(contents(p("old.bin")), old_);
  EXPECT_EQ(mode_of(p("old.bin")), 0444u);
}

TEST_F(CliFileSafety, ApplyRefusesAFifoTargetOrDeltaWithoutBlocking) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  const CommandResult target = apply(p("fifo"));
  EXPECT_TRUE(refused(target)) << target.output;
  EXPECT_TRUE(has(target, "'" + p("fifo") + "' is a FIFO, not a regular file")) << target.output;
  const CommandResult delta = apply(p("old.bin"), p("fifo"));
  EXPECT_TRUE(refused(delta)) << delta.output;
  EXPECT_TRUE(has(delta, "'" + p("fifo") + "' is a FIFO, not a regular file")) << delta.output;
  EXPECT_TRUE(fs::is_fifo(p("fifo")));
  EXPECT_EQ(contents(p("old.bin")), old_);
}

TEST_F(CliFileSafety, ApplyRefusesTheDeltaAsItsOwnTarget) {
  fs::create_symlink("d.wcd", p("delta-link"));
  const CommandResult r = apply(p("delta-link"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r, "output '" + p("delta-link") + "' is the input '" + p("d.wcd") + "'"))
      << r.output;
  EXPECT_EQ(contents(p("d.wcd")), delta_);
}

// `-o base.bin` used to replace the base with the delta.
TEST_F(CliFileSafety, EncodeRefusesAnInputAsOutput) {
  ASSERT_EQ(::link(p("new.bin").c_str(), p("new-hard.bin").c_str()), 0);
  fs::create_symlink("old.bin", p("old-link.bin"));
  for (const std::string& out : {p("old.bin"), p("new-hard.bin"), p("old-link.bin")}) {
    const CommandResult r = encode_to(out);
    EXPECT_NE(r.exit_code, 0) << out;
    EXPECT_TRUE(has(r, "output '" + out + "' is the input '")) << r.output;
  }
  EXPECT_EQ(contents(p("old.bin")), old_);
  EXPECT_EQ(contents(p("new.bin")), new_);
}

TEST_F(CliFileSafety, EncodeThroughASymlinkWritesTheTargetAndKeepsItsMode) {
  put(p("real.wcd"), "previous");
  ASSERT_EQ(::chmod(p("real.wcd").c_str(), 0600), 0);
  fs::create_symlink("real.wcd", p("out-link.wcd"));
  const CommandResult r = encode_to(p("out-link.wcd"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(p("out-link.wcd")));
  EXPECT_EQ(contents(p("real.wcd")), delta_);
  EXPECT_EQ(mode_of(p("real.wcd")), 0600u);
}

// Encode replaces its output atomically (docs/DECISIONS.md): the path gets the new delta
// whole, another hard link keeps the previous file whole, never a torn mix.
TEST_F(CliFileSafety, EncodeOverAHardLinkedOutputReplacesThePathOnly) {
  put(p("out.wcd"), "previous");
  ASSERT_EQ(::link(p("out.wcd").c_str(), p("out-hard.wcd").c_str()), 0);
  const CommandResult r = encode_to(p("out.wcd"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(contents(p("out.wcd")), delta_);
  EXPECT_EQ(contents(p("out-hard.wcd")), "previous");
}

TEST_F(CliFileSafety, EncodeRefusesAReadOnlyOrFifoOutput) {
  put(p("ro.wcd"), "keep");
  ASSERT_EQ(::chmod(p("ro.wcd").c_str(), 0444), 0);
  const CommandResult ro = encode_to(p("ro.wcd"));
  EXPECT_NE(ro.exit_code, 0);
  EXPECT_TRUE(has(ro, "'" + p("ro.wcd") + "' is read-only")) << ro.output;
  EXPECT_EQ(contents(p("ro.wcd")), "keep");
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  const CommandResult fifo = encode_to(p("fifo"));
  EXPECT_TRUE(refused(fifo)) << fifo.output;
  EXPECT_TRUE(has(fifo, "'" + p("fifo") + "' is a FIFO, not a regular file")) << fifo.output;
  EXPECT_TRUE(fs::is_fifo(p("fifo")));
}

TEST_F(CliFileSafety, EncodeRefusesAFifoInputWithoutBlocking) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  const CommandResult r =
      cli("delta encode --old " + p("fifo") + " --new " + p("new.bin") + " -o " + p("x.wcd"));
  EXPECT_TRUE(refused(r)) << r.output;
  EXPECT_TRUE(has(r, "'" + p("fifo") + "' is a FIFO, not a regular file")) << r.output;
  EXPECT_FALSE(fs::exists(p("x.wcd")));
}

// CLI11's ExistingFile said "File does not exist" for a loop.
TEST_F(CliFileSafety, SymlinkLoopIsNamedAsOne) {
  fs::create_symlink(p("loop-b"), p("loop-a"));
  fs::create_symlink(p("loop-a"), p("loop-b"));
  for (const std::string& args :
       {"delta inspect " + p("loop-a"),
        "delta apply --delta " + p("d.wcd") + " --target " + p("loop-a"),
        "journal inspect --root " + p("loop-a"), "group ranks --config " + p("loop-a")}) {
    const CommandResult r = cli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_TRUE(has(r, "symlink loop at '" + p("loop-a") + "'")) << args << "\n" << r.output;
    EXPECT_FALSE(has(r, "does not exist")) << r.output;
  }
}

TEST_F(CliFileSafety, FifoConfigIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(p("group.yaml").c_str(), 0644), 0);
  const CommandResult r = cli("group ranks --config " + p("group.yaml"));
  EXPECT_TRUE(refused(r)) << r.output;
  EXPECT_TRUE(has(r, "'" + p("group.yaml") + "' is a FIFO, not a regular file")) << r.output;
  const CommandResult d = weightcast::testing::run_command(
      "timeout -s KILL " + std::to_string(kDeadlineS) + " " + WEIGHTCASTD_PATH + " --config " +
      p("group.yaml") + " --rank 0");
  EXPECT_TRUE(refused(d)) << d.output;
  EXPECT_TRUE(has(d, "'" + p("group.yaml") + "' is a FIFO, not a regular file")) << d.output;
}

}  // namespace
