// Shared segments (transport/ucx/shared_segment.h): a memfd the publisher fills, mapped by a
// reader through /proc/<pid>/fd/<fd> only when it is the very segment its locator names.
#include "transport/ucx/shared_segment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

namespace weightcast {
namespace {

std::unique_ptr<SharedSegment> filled(uint64_t bytes) {
  auto seg = SharedSegment::create(bytes, "test segment");
  EXPECT_TRUE(seg.ok()) << seg.status().to_string();
  if (!seg.ok()) return nullptr;
  for (uint64_t i = 0; i < bytes; ++i) (*seg)->data()[i] = static_cast<uint8_t>(i * 7 + 1);
  return std::move(*seg);
}

void expect_refused(const SharedSegmentLocator& where, StatusCode code, const std::string& what) {
  auto m = MappedSegment::open(where, "reader");
  ASSERT_FALSE(m.ok()) << "mapped; expected a refusal mentioning '" << what << "'";
  EXPECT_EQ(m.status().code(), code) << m.status().to_string();
  EXPECT_NE(m.status().message().find(what), std::string::npos) << m.status().message();
}

// Every case needs the host's boot id, which segments are tied to.
class SharedSegments : public ::testing::Test {
 protected:
  void SetUp() override {
    if (this_host_boot_id().empty()) GTEST_SKIP() << "no /proc/sys/kernel/random/boot_id here";
  }
};

TEST_F(SharedSegments, ReaderSeesTheBytesAndLaterWrites) {
  auto seg = filled(1 << 20);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->locator().pid, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(seg->locator().bytes, 1u << 20);
  auto m = MappedSegment::open(seg->locator(), "reader");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->data().size(), 1u << 20);
  EXPECT_EQ(std::memcmp((*m)->data().data(), seg->data().data(), 1 << 20), 0);
  seg->data()[12345] ^= 0xff;  // the same pages, not a copy
  EXPECT_EQ((*m)->data()[12345], seg->data()[12345]);
}

TEST_F(SharedSegments, MappingOutlivesThePublishersSegment) {
  auto seg = filled(64 << 10);
  ASSERT_NE(seg, nullptr);
  const SharedSegmentLocator where = seg->locator();
  auto m = MappedSegment::open(where, "reader");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  seg.reset();  // unmapped and closed by the publisher
  EXPECT_EQ((*m)->data()[100], static_cast<uint8_t>(100 * 7 + 1));
  // A new reader no longer finds it (should the fd number be reused, the nonce refuses), and
  // says so as a closed segment of a live publisher.
  auto again = MappedSegment::open(where, "late reader");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kNotFound) << again.status().to_string();
}

TEST_F(SharedSegments, RefusesAnotherHost) {
  auto seg = filled(4096);
  ASSERT_NE(seg, nullptr);
  SharedSegmentLocator where = seg->locator();
  where.host = "not-this-host";
  expect_refused(where, StatusCode::kFailedPrecondition, "on another host");
}

TEST_F(SharedSegments, RefusesAnotherNonce) {
  auto seg = filled(4096);
  ASSERT_NE(seg, nullptr);
  SharedSegmentLocator where = seg->locator();
  where.nonce[3] ^= 1;  // as if the fd number now named another segment
  expect_refused(where, StatusCode::kNotFound, "nonce differs");
}

TEST_F(SharedSegments, RefusesAnotherSize) {
  auto seg = filled(4096);
  ASSERT_NE(seg, nullptr);
  SharedSegmentLocator where = seg->locator();
  where.bytes += 4096;
  expect_refused(where, StatusCode::kNotFound, "regular file");
  where.bytes = UINT64_MAX;  // header + bytes would wrap
  expect_refused(where, StatusCode::kNotFound, "regular file");
}

TEST_F(SharedSegments, RefusesAnFdThatIsNotASegment) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  SharedSegmentLocator where;
  where.host = this_host_boot_id();
  where.pid_namespace = this_pid_namespace();
  where.pid = static_cast<uint32_t>(::getpid());
  where.fd = static_cast<uint32_t>(fds[0]);  // a FIFO: opened without blocking, then refused
  where.bytes = 0;
  expect_refused(where, StatusCode::kNotFound, "regular file");
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(SharedSegments, RefusesAProcessThatIsGone) {
  SharedSegmentLocator where;
  where.host = this_host_boot_id();
  where.pid_namespace = this_pid_namespace();
  where.pid = 0x7ffffff0;  // above any pid_max
  where.fd = 3;
  expect_refused(where, StatusCode::kIoError, "has exited");
}

TEST_F(SharedSegments, RefusesAnotherPidNamespace) {
  auto seg = filled(4096);
  ASSERT_NE(seg, nullptr);
  SharedSegmentLocator where = seg->locator();
  EXPECT_EQ(where.pid_namespace, this_pid_namespace());
  where.pid_namespace += 1;
  expect_refused(where, StatusCode::kFailedPrecondition, "another pid namespace");
}

}  // namespace
}  // namespace weightcast
