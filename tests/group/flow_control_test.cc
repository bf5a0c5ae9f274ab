// Flow control of the rank group, in one process against a coordinator thread on loopback:
// a publisher never has more than max_in_flight versions uncommitted (the next one waits
// before it reads the trainer's tensors, and fails after the credit timeout naming the
// limit), and a subscriber whose attempts keep failing waits longer after each (250 ms,
// doubling; src/endpoint/subscriber.cc) instead of hammering the journal.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tests/group/trainer_side.h"

namespace weightcast::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Holds the engine's writes of versions >= `from` while closed: the subscriber cannot apply,
// so it does not ack, so nothing from `from` on commits.
class ApplyGate {
 public:
  explicit ApplyGate(uint64_t from) : from_(from) {}
  void before_apply(uint64_t version) {
    std::unique_lock<std::mutex> lock(mu_);
    if (version < from_) return;
    held_ = version;
    cv_.notify_all();
    cv_.wait_for(lock, seconds(60), [&] { return open_; });
  }
  // Whether a write is being held now.
  bool holding() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.has_value() && !open_;
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  const uint64_t from_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<uint64_t> held_;
  bool open_ = false;
};

// A group of one engine with `spec.max_in_flight` 2, versions 0..`committed_to` committed and
// `published_to` more published but held uncommitted by the engine's gate.
struct HeldGroup {
  explicit HeldGroup(PublisherOptions options = one_thread<PublisherOptions>(1))
      : group(spec()), trainer_side(group, std::move(options)) {}
  static GroupSpec spec() {
    GroupSpec s;
    s.subscribers = 1;
    s.max_in_flight = 2;
    return s;
  }
  // Commits 0, then publishes 1 and 2, which the gate keeps from committing.
  void fill_the_window() {
    ASSERT_TRUE(trainer_side.ok()) << trainer_side.why();
    SubscriberOptions so = one_thread<SubscriberOptions>(2);
    so.before_apply = [this](uint64_t v) { gate.before_apply(v); };
    engine_sub = connect_engine(group, so, engine, bad);
    ASSERT_NE(engine_sub, nullptr);
    ASSERT_TRUE(trainer_side.publish_committed(0, 1));
    ASSERT_TRUE(engine_at(*engine_sub, engine, 0));
    for (uint64_t v = 1; v <= 2; ++v) {
      trainer_side.trainer.set(v);
      auto h = trainer_side.publisher->publish(v);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      ASSERT_TRUE(h->wait_published(in(seconds(30))).ok()) << "v" << v;
    }
    ASSERT_TRUE(eventually([&] { return gate.holding(); }, seconds(30)))
        << "the engine never started writing v1";
    ASSERT_EQ(trainer_side.publisher->committed(), 0u);
  }

  TestGroup group;
  TrainerSide trainer_side;
  ApplyGate gate{1};
  Weights engine;
  std::vector<std::string> bad;
  std::unique_ptr<Subscriber> engine_sub;
};

TEST(FlowControl, TheVersionPastMaxInFlightWaitsUnreadUntilACommitFreesASlot) {
  HeldGroup h;
  ASSERT_NO_FATAL_FAILURE(h.fill_the_window());
  Publisher& publisher = *h.trainer_side.publisher;
  h.trainer_side.trainer.set(3);
  auto third = publisher.publish(3);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  // Two versions are uncommitted: v3 waits for credit before it reads the trainer's tensors
  // or writes anything (the trainer must not change them while it waits; so it is told).
  const Status read = third->wait_for_reads(in(milliseconds(1000)));
  EXPECT_EQ(read.code(), StatusCode::kDeadlineExceeded) << read.to_string();
  EXPECT_EQ(publisher.head(), 2u);
  EXPECT_FALSE(std::filesystem::exists(JournalLayout(h.group.journal()).step(3)));
  // The engine applies v1 and v2, their commits free the window and v3 goes out.
  h.gate.open();
  ASSERT_TRUE(third->wait_committed(in(seconds(30))).ok());
  EXPECT_TRUE(engine_at(*h.engine_sub, h.engine, 3));
  EXPECT_TRUE(h.bad.empty()) << h.bad.front();
}

TEST(FlowControl, PastTheCreditTimeoutThePublicationFailsNamingTheLimitAndTheNextGoesOut) {
  PublisherOptions options = one_thread<PublisherOptions>(1);
  options.credit_timeout = milliseconds(300);
  HeldGroup h(options);
  ASSERT_NO_FATAL_FAILURE(h.fill_the_window());
  Publisher& publisher = *h.trainer_side.publisher;
  h.trainer_side.trainer.set(3);
  auto third = publisher.publish(3);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  auto failed = third->wait_published(in(seconds(30)));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDeadlineExceeded) << failed.status().to_string();
  EXPECT_NE(failed.status().message().find("max_in_flight 2"), std::string::npos)
      << failed.status().to_string();
  EXPECT_NE(failed.status().message().find("2 published versions still uncommitted"),
            std::string::npos)
      << failed.status().to_string();
  EXPECT_EQ(publisher.head(), 2u);
  // Once the window frees, the next version is published and committed whole.
  h.gate.open();
  h.trainer_side.trainer.set(4);
  auto fourth = publisher.publish(4);
  ASSERT_TRUE(fourth.ok()) << fourth.status().to_string();
  ASSERT_TRUE(fourth->wait_committed(in(seconds(30))).ok());
  EXPECT_TRUE(engine_at(*h.engine_sub, h.engine, 4));
  EXPECT_TRUE(h.bad.empty()) << h.bad.front();
}

TEST(FlowControl, ASubscriberWhoseAttemptsFailWaitsTwiceAsLongAfterEach) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 100;  // no anchor to recover through: every attempt at v3 fails
  TestGroup g(spec);
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  ASSERT_TRUE(t.publish_committed(0, 3));
  t.trainer.set(3);
  ASSERT_TRUE(t.publisher->publish(3)->wait_published(in(seconds(30))).ok());
  corrupt_parts(g.journal(), 3);

  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, one_thread<SubscriberOptions>(2), engine, bad);
  ASSERT_NE(sub, nullptr);
  // The instant each of the first four nacks is seen (polled every 2 ms).
  std::vector<Clock::time_point> nacked;
  const auto until = Clock::now() + seconds(30);
  while (nacked.size() < 4 && Clock::now() < until) {
    while (nacked.size() < sub->stats().nacks && nacked.size() < 4) nacked.push_back(Clock::now());
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_EQ(nacked.size(), 4u) << "fewer than 4 failed attempts in 30 s";
  // 250 ms, then 500, then 1000 between attempts (less the polling's few ms).
  const milliseconds slack(20);
  const milliseconds expected[] = {milliseconds(250), milliseconds(500), milliseconds(1000)};
  for (size_t i = 0; i < 3; ++i) {
    const auto gap = std::chrono::duration_cast<milliseconds>(nacked[i + 1] - nacked[i]);
    EXPECT_GE(gap, expected[i] - slack) << "between nack " << i + 1 << " and " << i + 2;
  }
  EXPECT_TRUE(bad.empty()) << bad.front();
  EXPECT_EQ(sub->current_version(), 2u);  // still the last whole version
}

}  // namespace
}  // namespace weightcast::testing
