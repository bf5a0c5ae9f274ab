// A full disk during publication: whether the "No space left on device" comes from a test
// hook or from a real, full tmpfs, publish must return it, HEAD and every reader must stay on
// the previous version, the next writer must find .staging/ clean and publish on.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>

#include "tests/transport/journal_robustness_util.h"
#include "transport/fs/journal_files.h"

namespace weightcast {
namespace {

using testing::contains;
using testing::JournalTestModel;
using testing::ScratchDir;

constexpr uint64_t kSeed = 4242;

// Fails the k-th write and every one after it (a full disk stays full) until disarmed.
// Anchor shards are written from several threads, hence the atomics.
struct FullDisk {
  std::atomic<int> writes{0};
  std::atomic<int> fail_from{0};  // 0: never
  Status write(const std::string& file) {
    const int n = ++writes;
    if (fail_from > 0 && n >= fail_from) {
      return io_error("cannot write '" + file + "': No space left on device");
    }
    return ok_status();
  }
};

// The state a failed publication of `version` must leave behind: the error, the writer's
// and the file's HEAD on the version before, a reader there, and after a reopen a clean
// .staging/ and a successful publish of `version` that the reader follows.
void expect_failed_then_recovered(const std::string& root, std::unique_ptr<JournalWriter> writer,
                                  JournalTestModel* model, uint64_t version, FullDisk* disk) {
  const JournalLayout layout(root);
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(root, JournalTestModel(kSeed).destinations(&storage));
  ASSERT_TRUE(reader.catch_up().ok());

  JournalTestModel attempt = *model;
  auto failed = testing::publish_model_version(writer.get(), &attempt, version);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kIoError);
  EXPECT_TRUE(contains(failed.status().message(), "No space left on device"))
      << failed.status().to_string();
  EXPECT_EQ(writer->head()->version(), version - 1);
  auto head = read_head_file(layout.head());
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->version(), version - 1);
  auto caught = reader.catch_up();
  ASSERT_TRUE(caught.ok()) << caught.status().to_string();
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(version - 1));
  EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");

  disk->fail_from = 0;  // space freed
  writer.reset();
  auto reopened = JournalWriter::open(testing::robustness_options(root));
  ASSERT_TRUE(reopened.ok()) << reopened.status().to_string();
  EXPECT_EQ(testing::dir_entries(layout.staging()), std::vector<std::string>{});
  auto steps = layout.list_steps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->back(), version - 1) << "a step newer than HEAD survived the reopen";
  auto published = testing::publish_model_version(reopened->get(), model, version);
  ASSERT_TRUE(published.ok()) << published.status().to_string();
  caught = reader.catch_up();
  ASSERT_TRUE(caught.ok()) << caught.status().to_string();
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(version));
  EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");
}

// A journal at version `last` whose writer runs both write hooks through `disk`.
std::unique_ptr<JournalWriter> journal_with_hooks(const std::string& root, JournalTestModel* model,
                                                  uint64_t last, FullDisk* disk) {
  JournalOptions options = testing::robustness_options(root);
  options.delta.before_write = [disk](const std::string& file, uint64_t) {
    return disk->write(file);
  };
  options.anchor.before_write = [disk](const std::string& file, uint64_t, uint64_t) {
    return disk->write(file);
  };
  auto writer = JournalWriter::open(options);
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  if (!writer.ok()) return nullptr;
  EXPECT_TRUE(testing::publish_model_through(writer->get(), model, last).ok());
  return std::move(*writer);
}

TEST(JournalEnospc, InjectedDuringDeltaParts) {
  for (const int k : {1, 2, 4}) {
    SCOPED_TRACE("failing from part write " + std::to_string(k));
    ScratchDir dir;
    JournalTestModel model(kSeed);
    FullDisk disk;
    auto writer = journal_with_hooks(dir.path(), &model, 1, &disk);
    ASSERT_NE(writer, nullptr);
    disk.writes = 0;
    disk.fail_from = k;
    expect_failed_then_recovered(dir.path(), std::move(writer), &model, 2, &disk);
    EXPECT_GE(disk.writes.load(), k) << "the injected failure was never reached";
  }
}

TEST(JournalEnospc, InjectedDuringAnchor) {
  // Version 3 is an anchor (every 3) that also carries its delta: writes 1..n go to delta/,
  // the later ones to the shards.
  for (const int k : {1, 3, 12, 30}) {
    SCOPED_TRACE("failing from write " + std::to_string(k));
    ScratchDir dir;
    JournalTestModel model(kSeed);
    FullDisk disk;
    auto writer = journal_with_hooks(dir.path(), &model, 2, &disk);
    ASSERT_NE(writer, nullptr);
    disk.writes = 0;
    disk.fail_from = k;
    expect_failed_then_recovered(dir.path(), std::move(writer), &model, 3, &disk);
    EXPECT_GE(disk.writes.load(), k) << "the injected failure was never reached";
  }
}

// Unmounts (lazily, so a leftover open file cannot keep it) at the end of the scope.
struct Mount {
  std::string dir;
  ~Mount() { ::umount2(dir.c_str(), MNT_DETACH); }
};

// Fills the filesystem of `path` with zeros until ENOSPC, then gives back `slack` bytes.
bool fill_leaving(const std::string& path, uint64_t slack) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  std::vector<uint8_t> zeros(4096);
  uint64_t size = 0;
  while (::write(fd, zeros.data(), zeros.size()) > 0) size += zeros.size();
  const bool ok =
      errno == ENOSPC && ::ftruncate(fd, static_cast<off_t>(size > slack ? size - slack : 0)) == 0;
  ::close(fd);
  return ok;
}

TEST(JournalEnospc, RealFullTmpfs) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "mounting a tmpfs needs root (running as uid " << ::geteuid() << ")";
  ScratchDir dir;
  const std::string mnt = dir / "tmpfs";
  ASSERT_TRUE(make_directories(mnt).ok());
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a 256 KiB tmpfs at " << mnt << ": " << std::strerror(errno);
  }
  Mount unmount{mnt};
  const std::string root = mnt + "/journal";
  const JournalLayout layout(root);
  JournalTestModel model(kSeed);
  auto writer = JournalWriter::open(testing::robustness_options(root, 3, /*keep_anchors=*/1));
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  ASSERT_TRUE(testing::publish_model_through(writer->get(), &model, 1).ok());

  // A model over the whole 256 KiB (a new tensor set, so an anchor) cannot be published.
  JournalTestModel big(kSeed, 16);
  uint64_t big_bytes = 0;
  for (size_t i = 0; i < big.size(); ++i) big_bytes += big.bytes(i).size();
  ASSERT_GT(big_bytes, uint64_t{256} << 10);
  auto failed = (*writer)->publish(2, big.tensors(), {});
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(contains(failed.status().message(), std::strerror(ENOSPC)))
      << failed.status().to_string();
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(root, model.destinations(&storage));
  ASSERT_TRUE(reader.catch_up().ok());
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(1));
  EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");
  writer->reset();

  // Then a disk that is full to within `slack` bytes at each publication in turn, so ENOSPC
  // lands in every file a step writes (parts, shards, index, MANIFEST, HEAD's temp file):
  // each publication either fails leaving the previous version or succeeds, never between.
  int failures = 0, successes = 0;
  std::map<std::string, int> failed_in;  // which file the ENOSPC hit, by kind
  for (uint64_t slack = 0; slack <= (uint64_t{96} << 10); slack += 4096) {
    SCOPED_TRACE("slack " + std::to_string(slack));
    auto w = JournalWriter::open(testing::robustness_options(root, 3, 1));
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    ASSERT_EQ(testing::dir_entries(layout.staging()), std::vector<std::string>{});
    const uint64_t before = (*w)->head()->version();
    ASSERT_EQ(layout.list_steps()->back(), before) << "a step newer than HEAD survived the reopen";
    ASSERT_TRUE(fill_leaving(mnt + "/filler", slack));
    JournalTestModel attempt = model;
    auto r = testing::publish_model_version(w->get(), &attempt, before + 1);
    if (r.ok()) {
      ++successes;
      model = attempt;
    } else {
      ++failures;
      const std::string& m = r.status().message();
      ++failed_in[contains(m, ".wcd")           ? "part"
                  : contains(m, ".safetensors") ? "shard"
                  : contains(m, "index.json")   ? "index"
                  : contains(m, "MANIFEST")     ? "MANIFEST"
                  : contains(m, "HEAD")         ? "HEAD"
                                                : "other"];
      EXPECT_TRUE(contains(r.status().message(), std::strerror(ENOSPC))) << r.status().to_string();
    }
    auto head = read_head_file(layout.head());
    ASSERT_TRUE(head.ok()) << head.status().to_string();
    EXPECT_EQ(head->version(), model.version());
    ASSERT_EQ(::unlink((mnt + "/filler").c_str()), 0);
    auto caught = reader.catch_up();
    ASSERT_TRUE(caught.ok()) << caught.status().to_string();
    EXPECT_EQ(reader.held(), std::optional<uint64_t>(model.version()));
    EXPECT_EQ(testing::held_mismatch(reader, storage, kSeed), "");
  }
  std::string where;
  for (const auto& [kind, n] : failed_in) where += " " + kind + " " + std::to_string(n);
  std::printf(
      "[ tmpfs    ] full-disk sweep: %d publications failed cleanly (in:%s), %d succeeded\n",
      failures, where.c_str(), successes);
  EXPECT_GT(failures, 0);
  EXPECT_GT(successes, 0);
}

}  // namespace
}  // namespace weightcast
