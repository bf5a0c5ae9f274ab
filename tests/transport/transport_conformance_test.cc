#include "tests/transport/transport_conformance.h"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> part_bytes(uint64_t version, size_t index, size_t size) {
  std::vector<uint8_t> bytes(size);
  std::mt19937_64 rng(version * 131 + index);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// Parts of a version: an empty one, a small one and a 1 MiB one, contents tied to the version.
std::vector<std::vector<uint8_t>> make_parts(uint64_t version) {
  return {part_bytes(version, 0, 0), part_bytes(version, 1, 333), part_bytes(version, 2, 1 << 20)};
}

Status publish(PartPublisher& t, uint64_t version) {
  const auto parts = make_parts(version);
  std::vector<PartPayload> payload;
  for (size_t i = 0; i < parts.size(); ++i) {
    payload.push_back({"part-" + std::to_string(i), parts[i]});
  }
  return t.publish(version, payload, deadline_in(milliseconds(10'000)));
}

}  // namespace

void TransportConformance::SetUp() {
  peers_ = GetParam().connect();
  if (!peers_.cannot_run.empty()) {
    GTEST_SKIP() << GetParam().name << " cannot run here: " << peers_.cannot_run;
  }
  ASSERT_TRUE(peers_.publisher && peers_.subscriber) << GetParam().name << ": no peers made";
}

TEST_P(TransportConformance, PublishedPartsArriveWholeAndVerified) {
  const Status published_3 = publish(*peers_.publisher, 3);
  ASSERT_TRUE(published_3.ok()) << published_3.to_string();
  auto d = peers_.subscriber->describe(3, deadline_in(milliseconds(5000)));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const auto expected = make_parts(3);
  ASSERT_EQ(d->parts.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(d->parts[i].bytes, expected[i].size());
    std::vector<uint8_t> dest(d->parts[i].bytes, 0xAA);
    Status s = peers_.subscriber->fetch(3, d->parts[i], dest, deadline_in(milliseconds(5000)));
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(dest, expected[i]);
  }
}

TEST_P(TransportConformance, LatestIsTheNewestAndUnknownVersionsAreNotFound) {
  auto none = peers_.subscriber->latest(deadline_in(milliseconds(5000)));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  const Status published_1 = publish(*peers_.publisher, 1);
  ASSERT_TRUE(published_1.ok()) << published_1.to_string();
  const Status published_2 = publish(*peers_.publisher, 2);
  ASSERT_TRUE(published_2.ok()) << published_2.to_string();
  auto latest = peers_.subscriber->latest(deadline_in(milliseconds(5000)));
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  EXPECT_EQ(latest->version, 2u);
  auto missing = peers_.subscriber->describe(7, deadline_in(milliseconds(5000)));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_P(TransportConformance, VersionsMustIncrease) {
  const Status published_5 = publish(*peers_.publisher, 5);
  ASSERT_TRUE(published_5.ok()) << published_5.to_string();
  Status again = publish(*peers_.publisher, 5);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.to_string();
  Status older = publish(*peers_.publisher, 4);
  EXPECT_EQ(older.code(), StatusCode::kFailedPrecondition) << older.to_string();
}

TEST_P(TransportConformance, WrongDestinationSizeIsRefused) {
  const Status published_1 = publish(*peers_.publisher, 1);
  ASSERT_TRUE(published_1.ok()) << published_1.to_string();
  auto d = peers_.subscriber->describe(1, deadline_in(milliseconds(5000)));
  ASSERT_TRUE(d.ok());
  std::vector<uint8_t> small(d->parts[1].bytes - 1);
  Status s = peers_.subscriber->fetch(1, d->parts[1], small, deadline_in(milliseconds(5000)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
}

TEST_P(TransportConformance, CorruptPartIsDataLossNamingThePart) {
  if (!peers_.corrupt) GTEST_SKIP() << GetParam().name << " has no way to corrupt a part";
  const Status published_1 = publish(*peers_.publisher, 1);
  ASSERT_TRUE(published_1.ok()) << published_1.to_string();
  auto d = peers_.subscriber->describe(1, deadline_in(milliseconds(5000)));
  ASSERT_TRUE(d.ok());
  peers_.corrupt(1, d->parts[2].name);
  std::vector<uint8_t> dest(d->parts[2].bytes);
  Status s = peers_.subscriber->fetch(1, d->parts[2], dest, deadline_in(milliseconds(5000)));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find(d->parts[2].name), std::string::npos) << s.to_string();
  // A data error is not sticky: the intact part still arrives.
  std::vector<uint8_t> ok(d->parts[1].bytes);
  EXPECT_TRUE(peers_.subscriber->fetch(1, d->parts[1], ok, deadline_in(milliseconds(5000))).ok());
}

TEST_P(TransportConformance, PassedDeadlineIsDeadlineExceeded) {
  const Deadline past = std::chrono::steady_clock::now() - milliseconds(1);
  const auto parts = make_parts(1);
  std::vector<PartPayload> payload{{"a", parts[1]}};
  EXPECT_EQ(peers_.publisher->publish(1, payload, past).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(peers_.subscriber->latest(past).status().code(), StatusCode::kDeadlineExceeded);
}

TEST_P(TransportConformance, AConnectionErrorBreaksTheConnection) {
  if (!peers_.break_publisher) GTEST_SKIP() << GetParam().name << " cannot inject a failure";
  peers_.break_publisher();
  Status first = publish(*peers_.publisher, 1);
  ASSERT_FALSE(first.ok());
  Status second = publish(*peers_.publisher, 2);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.code(), StatusCode::kUnavailable) << second.to_string();
  EXPECT_NE(second.message().find(first.message()), std::string::npos)
      << "the broken connection's status names its first error: " << second.to_string();
  // Nothing of the failed publication is visible.
  EXPECT_EQ(peers_.subscriber->latest(deadline_in(milliseconds(5000))).status().code(),
            StatusCode::kNotFound);
}

TEST_P(TransportConformance, ReadersNeverSeeAPartialVersion) {
  std::atomic<bool> done{false};
  std::atomic<int> observed{0};  // versions read whole and compared, not merely looked up
  std::string failure;
  std::thread reader([&] {
    while (!done.load() && failure.empty()) {
      auto latest = peers_.subscriber->latest(deadline_in(milliseconds(5000)));
      if (!latest.ok()) continue;  // nothing yet
      const auto expected = make_parts(latest->version);
      if (latest->parts.size() != expected.size()) failure = "a version with missing parts";
      bool whole = true;
      for (size_t i = 0; i < latest->parts.size() && failure.empty(); ++i) {
        std::vector<uint8_t> dest(latest->parts[i].bytes);
        Status s = peers_.subscriber->fetch(latest->version, latest->parts[i], dest,
                                            deadline_in(milliseconds(5000)));
        // A version may be retired between describe and fetch; never may it be torn.
        if (s.ok() && dest != expected[i]) failure = "bytes of another version";
        if (!s.ok() && s.code() != StatusCode::kNotFound) failure = s.to_string();
        whole = whole && s.ok();
      }
      if (whole && !latest->parts.empty()) ++observed;
    }
  });
  Status published;
  for (uint64_t v = 1; v <= 20 && published.ok(); ++v) published = publish(*peers_.publisher, v);
  // The last version stays: on a loaded machine the reader may have seen every earlier one
  // retired under it, so it reads on (at most 10 s) until it has compared one whole.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (observed.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  done = true;
  reader.join();  // before any assertion returns: a joinable thread's destructor terminates
  ASSERT_TRUE(published.ok()) << published.to_string();
  EXPECT_TRUE(failure.empty()) << failure;
  // At least one version was fetched whole and equal, not only versions retired under the
  // reader (kNotFound), so the comparison above really ran.
  EXPECT_GT(observed.load(), 0);
}

}  // namespace weightcast::testing
