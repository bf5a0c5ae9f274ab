// The serial executor (codec/base/serial_executor.h): tasks run one at a time on one thread in
// the order posted; stop either runs or drops what is queued, refuses later posts and joins.
#include "codec/base/serial_executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace weightcast {
namespace {

using namespace std::chrono_literals;

TEST(SerialExecutor, RunsTasksOneAtATimeOnOneThreadInTheOrderPosted) {
  SerialExecutor ex(SerialExecutor::OnStop::kRunQueued);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::atomic<int> running{0}, most{0};
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(ex.post([&, i] {
      most = std::max(most.load(), ++running);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      --running;
    }));
  }
  ex.stop();  // runs what is queued
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
  for (const auto& t : threads) EXPECT_EQ(t, threads.front());
  EXPECT_NE(threads.front(), std::this_thread::get_id());
  EXPECT_EQ(most.load(), 1);
}

// A task that holds the executor until released, so that others queue behind it.
struct Gate {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::function<void()> task() {
    return [this] {
      entered.set_value();
      released.wait();
    };
  }
};

TEST(SerialExecutor, PendingCountsTheQueuedAndTheRunning) {
  SerialExecutor ex(SerialExecutor::OnStop::kRunQueued);
  EXPECT_EQ(ex.pending(), 0u);
  Gate gate;
  ASSERT_TRUE(ex.post(gate.task()));
  gate.entered.get_future().wait();
  ASSERT_TRUE(ex.post([] {}));
  ASSERT_TRUE(ex.post([] {}));
  EXPECT_EQ(ex.pending(), 3u);
  gate.release.set_value();
  ex.stop();
  EXPECT_EQ(ex.pending(), 0u);
}

TEST(SerialExecutor, StopInRunQueuedModeRunsEveryQueuedTaskThenRefusesPosts) {
  SerialExecutor ex(SerialExecutor::OnStop::kRunQueued);
  Gate gate;
  ASSERT_TRUE(ex.post(gate.task()));
  gate.entered.get_future().wait();
  std::atomic<int> ran{0};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(ex.post([&] { ++ran; }));
  std::thread stopper([&] { ex.stop(); });
  std::this_thread::sleep_for(20ms);  // stop has begun (it waits for the gated task)
  gate.release.set_value();
  stopper.join();
  EXPECT_EQ(ran.load(), 5);
  EXPECT_FALSE(ex.post([&] { ++ran; }));
  ex.stop();  // idempotent
  EXPECT_EQ(ran.load(), 5);
}

TEST(SerialExecutor, StopInDropModeLetsTheRunningTaskEndAndRunsNothingQueued) {
  std::atomic<int> ran{0};
  Gate gate;
  {
    SerialExecutor ex(SerialExecutor::OnStop::kDropQueued);
    ASSERT_TRUE(ex.post(gate.task()));
    gate.entered.get_future().wait();
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ex.post([&] { ++ran; }));
    std::thread stopper([&] { ex.stop(); });
    // stop() has dropped the queue once only the gated task is pending (bounded wait).
    for (int i = 0; i < 5000 && ex.pending() != 1; ++i) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(ex.pending(), 1u);
    gate.release.set_value();
    stopper.join();
    EXPECT_EQ(ex.pending(), 0u);
    EXPECT_FALSE(ex.post([&] { ++ran; }));
  }
  EXPECT_EQ(ran.load(), 0);
}

TEST(SerialExecutor, TheDestructorStopsInItsMode) {
  std::atomic<int> ran{0};
  {
    SerialExecutor ex(SerialExecutor::OnStop::kRunQueued);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(ex.post([&] { ++ran; }));
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace weightcast
