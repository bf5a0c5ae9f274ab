// Reusable staging for the host copy executor: a StagingPool hands released buffers
// to later plans; lent buffers are never shared, results keep theirs while alive, and the
// pool's cache stays under its cap.
#include "transport/staging_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "codec/base/thread_pool.h"
#include "src/packed_expert_export.h"

namespace weightcast {
namespace {

// Two packed f32 parameters of four experts with their moments. `expert_floats` large (1 MiB
// and up per tensor) exercises the mapped, pre-faulted buffers; small, the heap ones.
struct Experts {
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<PackedParameter> params;

  Experts(int64_t expert_floats, uint32_t seed) {
    buffers.reserve(6);
    for (const char* suffix : {"gate_up_proj", "down_proj"}) {
      PackedParameter p{
          "model.layers.0.mlp.experts", suffix, DType::kF32, {4, expert_floats}, {}, {}, {}};
      for (auto* state : {&p.master, &p.exp_avg, &p.exp_avg_sq}) {
        buffers.emplace_back(static_cast<size_t>(4 * expert_floats * 4));
        *state = buffers.back();
      }
      params.push_back(p);
    }
    refill(seed);
  }
  void refill(uint32_t seed) {  // new bytes in place: the spans stay valid
    std::mt19937_64 rng(seed);
    for (auto& b : buffers) {
      for (size_t i = 0; i < b.size(); i += 8) {
        const uint64_t x = rng();
        std::memcpy(b.data() + i, &x, std::min<size_t>(8, b.size() - i));
      }
    }
  }
};

// Every tensor of `e` holds the bytes of its expert in `f`'s current buffers.
void expect_matches(const ExpertExport& e, const Experts& f) {
  ASSERT_EQ(e.tensors.size(), 24u);
  size_t i = 0;  // request order: state, parameter, expert
  for (int state = 0; state < 3; ++state) {
    for (int param = 0; param < 2; ++param) {
      const std::vector<uint8_t>& src = f.buffers[param * 3 + state];
      const size_t per_expert = src.size() / 4;
      for (size_t expert = 0; expert < 4; ++expert, ++i) {
        ASSERT_EQ(e.tensors[i].bytes.size(), per_expert);
        ASSERT_EQ(
            0, std::memcmp(e.tensors[i].bytes.data(), src.data() + expert * per_expert, per_expert))
            << e.tensors[i].name;
      }
    }
  }
}

std::set<const uint8_t*> tensor_addresses(const ExpertExport& e) {
  std::set<const uint8_t*> out;
  for (const auto& t : e.tensors) out.insert(t.bytes.data());
  return out;
}

TEST(StagingPool, ReusedStagingYieldsIdenticalBytes) {
  ThreadPool pool(2);
  for (int64_t expert_floats : {int64_t{24}, int64_t{1} << 18}) {  // heap and mapped buffers
    for (bool coalesce : {true, false}) {
      Experts f(expert_floats, 1);
      StagingPool staging;
      auto first = export_packed_experts(f.params, {}, coalesce, &pool, &staging);
      ASSERT_TRUE(first.ok()) << first.status().to_string();
      EXPECT_EQ(first->staged.reused_transfers(), 0u);
      expect_matches(*first, f);
      first = internal_error("released");  // its buffers go back to the pool
      f.refill(2);                         // stale bytes in reused staging would show
      auto second = export_packed_experts(f.params, {}, coalesce, &pool, &staging);
      ASSERT_TRUE(second.ok());
      EXPECT_EQ(second->staged.reused_transfers(), second->staged.transfer_calls());
      EXPECT_EQ(staging.stats().hits, second->staged.transfer_calls());
      expect_matches(*second, f);
    }
  }
}

TEST(StagingPool, SlicesOfALiveResultStayValidAndAreNotReused) {
  Experts f(int64_t{1} << 18, 3);
  StagingPool staging;
  auto a = export_packed_experts(f.params, {}, true, nullptr, &staging);
  ASSERT_TRUE(a.ok());
  const auto a_addresses = tensor_addresses(*a);
  const Experts a_bytes(int64_t{1} << 18, 3);  // what `a` must keep showing
  f.refill(4);
  auto b = export_packed_experts(f.params, {}, true, nullptr, &staging);  // `a` still alive
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->staged.reused_transfers(), 0u);
  for (const uint8_t* p : tensor_addresses(*b)) EXPECT_EQ(a_addresses.count(p), 0u);
  expect_matches(*a, a_bytes);
  expect_matches(*b, f);
  a = internal_error("released");
  f.refill(5);
  auto c = export_packed_experts(f.params, {}, true, nullptr, &staging);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->staged.reused_transfers(), c->staged.transfer_calls());  // a's buffers
  EXPECT_EQ(tensor_addresses(*c), a_addresses);
  f.refill(4);
  expect_matches(*b, f);  // b untouched by c's copies
}

TEST(StagingPool, TwoPlansConcurrentlySharingOnePoolDoNotInterfere) {
  StagingPool staging;
  Experts fa(int64_t{1} << 18, 10), fb(int64_t{1} << 18, 20);
  ThreadPool pool_a(2), pool_b(2);
  auto run = [&staging](const Experts& f, ThreadPool* pool, bool* ok) {
    for (int i = 0; i < 6; ++i) {
      auto e = export_packed_experts(f.params, {}, i % 2 == 0, pool, &staging);
      if (!e.ok()) return;
      expect_matches(*e, f);
    }
    *ok = true;
  };
  bool ok_a = false, ok_b = false;
  std::thread ta(run, std::cref(fa), &pool_a, &ok_a);
  std::thread tb(run, std::cref(fb), &pool_b, &ok_b);
  ta.join();
  tb.join();
  EXPECT_TRUE(ok_a && ok_b);
  const StagingPool::Stats s = staging.stats();
  EXPECT_EQ(s.lent_bytes, 0u);
  EXPECT_GT(s.hits, 0u);
}

TEST(StagingPool, CacheStaysUnderItsCapAndEvictsTheLeastRecent) {
  StagingPool staging(10 << 10);
  std::vector<StagingBuffer> held;
  std::vector<uint8_t*> addresses;
  for (int i = 0; i < 4; ++i) {
    auto b = staging.acquire(4 << 10);
    ASSERT_TRUE(b.ok());
    addresses.push_back(b->data());
    held.push_back(std::move(*b));
  }
  EXPECT_EQ(staging.stats().lent_bytes, 16u << 10);
  for (auto& b : held) b = StagingBuffer();  // releases 0, 1, 2, 3: 0 and 1 are evicted
  StagingPool::Stats s = staging.stats();
  EXPECT_EQ(s.cached_bytes, 8u << 10);
  EXPECT_EQ(s.lent_bytes, 0u);
  EXPECT_EQ(s.evicted, 2u);
  auto again = staging.acquire(4 << 10);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->warm());
  EXPECT_TRUE(again->data() == addresses[2] || again->data() == addresses[3]);
  {
    auto too_big = staging.acquire(64 << 10);  // more than the cap: freed, never cached
    ASSERT_TRUE(too_big.ok());
    EXPECT_FALSE(too_big->warm());
  }
  s = staging.stats();
  EXPECT_LE(s.cached_bytes, staging.max_cached_bytes());
  EXPECT_EQ(s.evicted, 3u);
  staging.trim();
  EXPECT_EQ(staging.stats().cached_bytes, 0u);
}

TEST(StagingPool, NoOversizedReuseAndBuffersMayOutliveThePool) {
  auto staging = std::make_unique<StagingPool>();
  { auto big = staging->acquire(5 << 20); }  // cached: capacity 6 MiB
  auto small = staging->acquire(1 << 20);    // 6 MiB is over twice 2 MiB: a fresh one
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->warm());
  EXPECT_EQ(small->capacity(), 2u << 20);
  small->prefault(0, small->capacity());
  std::memset(small->data(), 0x5A, small->capacity());
  staging.reset();  // `small` is freed on release instead (ASan: no leak, no use after free)
  EXPECT_EQ(small->data()[(2 << 20) - 1], 0x5A);
}

TEST(StagingPool, CancelledPlanReturnsItsStagingToThePool) {
  std::vector<uint8_t> big(8u << 20, 7);
  std::vector<CopyRequest> r = {
      {"all", 0, big.size(), 0, big.size(), DType::kU8, {int64_t(big.size())}}};
  const uint8_t* sources[] = {big.data()};
  CancelToken cancel;
  cancel.cancelled = true;
  StagingPool staging;
  auto staged = execute_copy_plan(plan_copies(r), r, sources, nullptr, &cancel, &staging);
  ASSERT_FALSE(staged.ok());
  EXPECT_NE(staged.status().message().find("cancelled"), std::string::npos);
  EXPECT_EQ(staging.stats().lent_bytes, 0u);
  EXPECT_EQ(staging.stats().cached_bytes, 8u << 20);
}

}  // namespace
}  // namespace weightcast
