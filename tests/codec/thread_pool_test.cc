#include "codec/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace weightcast {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3u);
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{1000}}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
  }
}

TEST(ThreadPool, BackToBackCallsDoNotMix) {
  ThreadPool pool(2);
  for (int round = 0; round < 500; ++round) {
    std::atomic<size_t> sum{0};
    pool.parallel_for(64, [&](size_t i) { sum += i + round; });
    ASSERT_EQ(sum.load(), 64u * 63 / 2 + 64u * round);
  }
}

TEST(ThreadPool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(2);
  std::atomic<size_t> total{0};
  std::thread other([&] {
    for (int r = 0; r < 100; ++r) pool.parallel_for(10, [&](size_t) { ++total; });
  });
  for (int r = 0; r < 100; ++r) pool.parallel_for(10, [&](size_t) { ++total; });
  other.join();
  EXPECT_EQ(total.load(), 2000u);
}

}  // namespace
}  // namespace weightcast
