// UserFileWriter (transport/user_file_writer.h): links, modes, refusals and temp files, on real
// files in a scratch directory. Anything that could block runs in a forked child under a
// deadline, so a hang fails the test instead of blocking the suite.
#include "transport/user_file_writer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tests/transport/user_file_test_util.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using testing_util::contents;
using testing_util::finishes_within;
using testing_util::inode_of;
using testing_util::mode_of;
using testing_util::put;

class UserFileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-user-file-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> temps() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.find(".wctmp.") != std::string::npos || n.find(".tmp.") != std::string::npos)
        out.push_back(n);
    }
    return out;
  }
  static Status write(const std::string& path, const std::string& text, UserWriteMode mode,
                      std::vector<std::string> inputs = {}) {
    return write_user_file(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                           {mode, std::move(inputs)});
  }
  std::string dir_;
};

constexpr UserWriteMode kModes[] = {UserWriteMode::kInPlace, UserWriteMode::kAtomicReplace};

TEST_F(UserFileWriterTest, InPlaceKeepsInodeHardLinksAndMode) {
  put(p("model.bin"), "old contents, longer than the new ones");
  ASSERT_EQ(::chmod(p("model.bin").c_str(), 0640), 0);
  ASSERT_EQ(::link(p("model.bin").c_str(), p("other-link.bin").c_str()), 0);
  const ino_t before = inode_of(p("model.bin"));
  ASSERT_TRUE(write(p("model.bin"), "new", UserWriteMode::kInPlace).ok());
  EXPECT_EQ(inode_of(p("model.bin")), before);
  EXPECT_EQ(contents(p("model.bin")), "new");
  EXPECT_EQ(contents(p("other-link.bin")), "new");
  EXPECT_EQ(mode_of(p("model.bin")), 0640u);
  EXPECT_TRUE(temps().empty());
}

TEST_F(UserFileWriterTest, BothModesWriteTheSymlinkTargetAndKeepTheLink) {
  for (const UserWriteMode mode : kModes) {
    put(p("real.bin"), "old");
    ASSERT_EQ(::chmod(p("real.bin").c_str(), 0600), 0);
    fs::remove(p("link.bin"));
    fs::create_symlink("real.bin", p("link.bin"));
    ASSERT_TRUE(write(p("link.bin"), "new", mode).ok());
    EXPECT_TRUE(fs::is_symlink(p("link.bin")));
    EXPECT_EQ(contents(p("real.bin")), "new");
    EXPECT_EQ(mode_of(p("real.bin")), 0600u);
  }
}

TEST_F(UserFileWriterTest, AtomicReplaceKeepsTheModeOfTheOldFile) {
  put(p("out.wcd"), "old");
  ASSERT_EQ(::chmod(p("out.wcd").c_str(), 0751), 0);
  ASSERT_TRUE(write(p("out.wcd"), "new", UserWriteMode::kAtomicReplace).ok());
  EXPECT_EQ(contents(p("out.wcd")), "new");
  EXPECT_EQ(mode_of(p("out.wcd")), 0751u);
  EXPECT_TRUE(temps().empty());
}

TEST_F(UserFileWriterTest, ReadOnlyFileIsRefusedAndLeftAlone) {
  for (const UserWriteMode mode : kModes) {
    put(p("ro.bin"), "keep");
    ASSERT_EQ(::chmod(p("ro.bin").c_str(), 0444), 0);
    const Status s = write(p("ro.bin"), "new", mode);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("'" + p("ro.bin") + "' is read-only"), std::string::npos)
        << s.message();
    EXPECT_EQ(contents(p("ro.bin")), "keep");
    EXPECT_EQ(mode_of(p("ro.bin")), 0444u);
    ASSERT_EQ(::chmod(p("ro.bin").c_str(), 0644), 0);
  }
}

TEST_F(UserFileWriterTest, FifoAndDirectoryOutputsAreRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  fs::create_directory(p("dir"));
  for (const UserWriteMode mode : kModes) {
    std::string message;
    EXPECT_TRUE(finishes_within(std::chrono::seconds(10), [&] {
      const Status s = write(p("fifo"), "x", mode);
      return !s.ok() && s.message().find("'" + p("fifo") + "' is a FIFO, not a regular file") !=
                            std::string::npos;
    }));
    const Status d = write(p("dir"), "x", mode);
    EXPECT_NE(d.message().find("'" + p("dir") + "' is a directory, not a regular file"),
              std::string::npos)
        << d.message();
  }
  EXPECT_TRUE(fs::is_fifo(p("fifo")));
}

TEST_F(UserFileWriterTest, OutputThatIsAnInputIsRefused) {
  put(p("base.bin"), "base");
  ASSERT_EQ(::link(p("base.bin").c_str(), p("hard.bin").c_str()), 0);
  fs::create_symlink("base.bin", p("sym.bin"));
  for (const std::string& out :
       {p("base.bin"), p("hard.bin"), p("sym.bin"), dir_ + "/./base.bin"}) {
    const Status s = write(out, "x", UserWriteMode::kAtomicReplace, {p("base.bin")});
    ASSERT_FALSE(s.ok()) << out;
    EXPECT_NE(s.message().find("output '" + out + "' is the input '" + p("base.bin") + "'"),
              std::string::npos)
        << s.message();
  }
  EXPECT_EQ(contents(p("base.bin")), "base");
  // Neither exists yet: the same resolved path is still the same file.
  const Status s = write(p("new.bin"), "x", UserWriteMode::kAtomicReplace, {dir_ + "/./new.bin"});
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists(p("new.bin")));
}

TEST_F(UserFileWriterTest, OutputInsideAJournalIsRefused) {
  const std::vector<std::function<void(const std::string&)>> journals = {
      [](const std::string& root) { put(root + "/LOCK", ""); },
      [](const std::string& root) { fs::create_directory(root + "/.staging"); },
      [](const std::string& root) { put(root + "/JOURNAL", ""); },
      [](const std::string& root) {
        put(root + "/HEAD", "");
        fs::create_directory(root + "/v00000000000000000001");
      },
  };
  for (size_t i = 0; i < journals.size(); ++i) {
    const std::string root = p("journal" + std::to_string(i));
    fs::create_directories(root + "/v00000000000000000001");
    journals[i](root);
    for (const std::string& out :
         {root + "/model.safetensors", root + "/v00000000000000000001/shard-0.safetensors"}) {
      const Status s = write(out, "x", UserWriteMode::kAtomicReplace);
      ASSERT_FALSE(s.ok()) << out;
      EXPECT_NE(s.message().find("output '" + out + "' lies inside the journal '" + root + "'"),
                std::string::npos)
          << s.message();
      EXPECT_FALSE(fs::exists(out));
    }
  }
  // A directory beside a journal is not inside it; an explicit root is refused even when bare.
  EXPECT_TRUE(write(p("beside.bin"), "x", UserWriteMode::kAtomicReplace).ok());
  fs::create_directory(p("bare"));
  EXPECT_FALSE(
      write_user_file(p("bare/m.bin"), {}, {UserWriteMode::kAtomicReplace, {}, {p("bare")}}).ok());
}

TEST_F(UserFileWriterTest, UncommittedWriterLeavesNoTempAndTheOldFile) {
  put(p("out.bin"), "old");
  {
    auto w = UserFileWriter::create(p("out.bin"), {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->write({reinterpret_cast<const uint8_t*>("half"), 4}).ok());
    EXPECT_EQ(temps().size(), 1u);
  }
  EXPECT_TRUE(temps().empty());
  EXPECT_EQ(contents(p("out.bin")), "old");
}

TEST_F(UserFileWriterTest, TempOfAKilledWriterIsRemovedByTheNextOne) {
  put(p("out.bin"), "old");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto w = UserFileWriter::create(p("out.bin"), {});
    if (!w.ok() || !w->write({reinterpret_cast<const uint8_t*>("partial"), 7}).ok()) _exit(1);
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(temps().size(), 1u);
  // A temp of a live process (the test's parent) and of another file are left alone.
  const std::string live = ".out.bin.wctmp." + std::to_string(::getppid()) + ".0";
  put(p(live), "busy");
  put(p(".other.bin.wctmp.999999999.0"), "");
  put(p(".out.bin.tmp." + std::to_string(child)), "legacy name of the earlier writer");
  ASSERT_TRUE(write(p("out.bin"), "new", UserWriteMode::kAtomicReplace).ok());
  EXPECT_EQ(contents(p("out.bin")), "new");
  std::vector<std::string> left = temps();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".other.bin.wctmp.999999999.0", live}));
}

TEST_F(UserFileWriterTest, CheckUserOutputCreatesNothing) {
  EXPECT_TRUE(check_user_output(p("fresh.bin"), {}).ok());
  EXPECT_FALSE(fs::exists(p("fresh.bin")));
  EXPECT_TRUE(temps().empty());
  const Status s = check_user_output(p("missing-dir/x.bin"), {});
  EXPECT_NE(s.message().find("the directory of '" + p("missing-dir/x.bin") + "' does not exist"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace weightcast
