// The path checks (codec/base/user_path.h) and the readers of file_io.h on what is not a regular
// file: a FIFO is refused without blocking, a symlink loop is named as one.
#include "codec/base/user_path.h"
#include "transport/fs/journal_root.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "codec/base/file_io.h"
#include "tests/transport/user_file_test_util.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using testing_util::finishes_within;
using testing_util::put;

bool mentions(const Status& s, const std::string& text) {
  return !s.ok() && s.message().find(text) != std::string::npos;
}

class UserPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weightcast-user-path-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    fs::create_symlink(p("loop-b"), p("loop-a"));
    fs::create_symlink(p("loop-a"), p("loop-b"));
    ::mkfifo(p("fifo").c_str(), 0644);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(UserPathTest, ReadersRefuseAFifoWithoutBlocking) {
  const std::string fifo = p("fifo");
  const std::string want = "'" + fifo + "' is a FIFO, not a regular file";
  EXPECT_TRUE(finishes_within(std::chrono::seconds(10),
                              [&] { return mentions(read_whole_file(fifo).status(), want); }));
  EXPECT_TRUE(finishes_within(std::chrono::seconds(10),
                              [&] { return mentions(MappedFile::open(fifo).status(), want); }));
}

TEST_F(UserPathTest, ReadersNameASymlinkLoopAndADirectory) {
  EXPECT_TRUE(mentions(read_whole_file(p("loop-a")).status(), "symlink loop at '" + p("loop-a")));
  EXPECT_TRUE(
      mentions(MappedFile::open(p("loop-a")).status(), "symlink loop at '" + p("loop-a") + "'"));
  EXPECT_TRUE(
      mentions(read_whole_file(dir_).status(), "'" + dir_ + "' is a directory, not a regular"));
  EXPECT_EQ(read_whole_file(p("missing")).status().code(), StatusCode::kNotFound);
}

TEST_F(UserPathTest, ReaderRefusesASocketNamingIt) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = p("sock");
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_TRUE(mentions(read_whole_file(path).status(), "'" + path + "' is a socket"));
  ::close(fd);
}

TEST_F(UserPathTest, ChecksGiveTheReason) {
  put(p("file"), "x");
  EXPECT_TRUE(check_regular_file(p("file")).ok());
  EXPECT_TRUE(mentions(check_regular_file(p("loop-a")), "symlink loop at '" + p("loop-a") + "'"));
  EXPECT_TRUE(mentions(check_regular_file(p("fifo")), "is a FIFO, not a regular file"));
  EXPECT_TRUE(mentions(check_regular_file(dir_), "is a directory, not a regular file"));
  EXPECT_TRUE(mentions(check_regular_file(p("missing")), "'" + p("missing") + "' does not exist"));
  EXPECT_TRUE(check_directory(dir_).ok());
  EXPECT_TRUE(mentions(check_directory(p("loop-a")), "symlink loop at"));
  EXPECT_TRUE(mentions(check_directory(p("file")), "is a regular file, not a directory"));
  EXPECT_TRUE(check_existing_path(p("fifo")).ok());
  EXPECT_TRUE(mentions(check_existing_path(p("loop-b")), "symlink loop at '" + p("loop-b")));
}

TEST_F(UserPathTest, ResolveFollowsLinksAndRefusesDanglingOnes) {
  put(p("real"), "x");
  fs::create_symlink("real", p("link"));
  fs::create_symlink("nowhere", p("dangling"));
  auto resolved = resolve_user_path(p("link"));
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, fs::canonical(p("real")).string());
  auto fresh = resolve_user_path(p("./new-file"));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(*fresh, fs::canonical(dir_).string() + "/new-file");
  EXPECT_TRUE(mentions(resolve_user_path(p("dangling")).status(), "does not exist"));
  EXPECT_TRUE(mentions(resolve_user_path(p("loop-a")).status(), "symlink loop at"));
}

TEST_F(UserPathTest, EnclosingJournalRootFindsTheNearestJournal) {
  const std::string root = fs::canonical(dir_).string() + "/j";
  fs::create_directories(root + "/v00000000000000000003/sub");
  EXPECT_FALSE(enclosing_journal_root(root + "/v00000000000000000003/sub"));
  put(root + "/LOCK", "");
  EXPECT_EQ(enclosing_journal_root(root + "/v00000000000000000003/sub"), root);
  EXPECT_EQ(enclosing_journal_root(root), root);
  EXPECT_FALSE(enclosing_journal_root(fs::canonical(dir_).string()));
}

}  // namespace
}  // namespace weightcast
