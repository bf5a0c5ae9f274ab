// The rendezvous stores' contracts: absent keys, replacement, erase, key escaping, and (for
// the file store) visibility across processes.
#include "transport/ucx/rendezvous_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <filesystem>

namespace weightcast {
namespace {

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "wc_store.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void check_contract(RendezvousStore& store) {
  auto absent = store.get("v/00000000000000000001");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
  ASSERT_TRUE(store.put("v/00000000000000000001", bytes("one")).ok());
  ASSERT_TRUE(store.put("latest", bytes("first")).ok());
  ASSERT_TRUE(store.put("latest", bytes("second")).ok());
  EXPECT_EQ(store.get("latest")->value(), bytes("second"));
  EXPECT_EQ(store.get("v/00000000000000000001")->value(), bytes("one"));
  ASSERT_TRUE(store.erase("v/00000000000000000001").ok());
  EXPECT_FALSE(store.get("v/00000000000000000001")->has_value());
  EXPECT_TRUE(store.erase("never-there").ok());
  // Keys that differ only in characters a file name cannot carry stay distinct.
  ASSERT_TRUE(store.put("a/b", bytes("slash")).ok());
  ASSERT_TRUE(store.put("a_b", bytes("underscore")).ok());
  EXPECT_EQ(store.get("a/b")->value(), bytes("slash"));
  EXPECT_EQ(store.get("a_b")->value(), bytes("underscore"));
}

TEST(RendezvousStore, InMemoryKeepsTheContract) {
  InMemoryStore store;
  check_contract(store);
}

TEST(RendezvousStore, FileStoreKeepsTheContract) {
  TempDir dir;
  FileStore store(dir.path());
  check_contract(store);
}

TEST(RendezvousStore, FileStoreKeysNeverLeaveTheDirectory) {
  TempDir dir;
  const std::string inner = dir.path() + "/inner";
  std::filesystem::create_directory(inner);
  FileStore store(inner);
  ASSERT_TRUE(store.put("../escaped", bytes("x")).ok());
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename(), "inner") << "a key escaped as " << e.path();
  }
  EXPECT_EQ(store.get("../escaped")->value(), bytes("x"));
}

TEST(RendezvousStore, FileStoreIsSharedAcrossProcesses) {
  TempDir dir;
  const pid_t child = ::fork();
  if (child == 0) {
    FileStore store(dir.path());
    ::_exit(store.put("latest", bytes("from the child")).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FileStore store(dir.path());
  auto got = store.get("latest");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(got->value(), bytes("from the child"));
}

}  // namespace
}  // namespace weightcast
