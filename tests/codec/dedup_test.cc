#include "codec/dedup.h"

#include <gtest/gtest.h>

#include <cstring>

#include "codec/base/thread_pool.h"
#include "codec/workload/adapter_fixtures.h"

namespace weightcast {
namespace {

TensorBytesView view(const char* name, DType dtype, std::vector<int64_t> shape,
                     const std::vector<uint8_t>& bytes) {
  return {name, dtype, std::move(shape), bytes};
}

TEST(Dedup, EqualBytesShareAStorageAndStatsAddUp) {
  const std::vector<uint8_t> x = {1, 2, 3, 4, 5, 6, 7, 8}, x_copy = x, y = {1, 2, 3, 4, 5, 6, 7, 9};
  const std::vector<TensorBytesView> t = {
      view("a", DType::kF32, {2}, x), view("b", DType::kF32, {2}, x_copy),
      view("c", DType::kF32, {2}, y), view("d", DType::kF32, {2}, x)};
  auto r = deduplicate(t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->storage_of, (std::vector<uint32_t>{0, 0, 1, 0}));
  EXPECT_EQ(r->representative, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(r->stats.keys, 4u);
  EXPECT_EQ(r->stats.logical_bytes, 32u);
  EXPECT_EQ(r->stats.unique_storages, 2u);
  EXPECT_EQ(r->stats.unique_bytes, 16u);
}

TEST(Dedup, DtypeOrShapeDifferenceKeepsStoragesApart) {
  const std::vector<uint8_t> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<TensorBytesView> t = {
      view("f32", DType::kF32, {2}, x), view("i32", DType::kI32, {2}, x),
      view("f32x", DType::kF32, {1, 2}, x), view("bf16", DType::kBF16, {4}, x)};
  auto r = deduplicate(t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.unique_storages, 4u);
}

TEST(Dedup, SignedZerosAndNanPayloadsAreDifferentValues) {
  const float pz = 0.0f, nz = -0.0f;
  std::vector<uint8_t> a(4), b(4), n1(4), n2(4);
  std::memcpy(a.data(), &pz, 4);
  std::memcpy(b.data(), &nz, 4);
  const uint32_t nan1 = 0x7FC00001u, nan2 = 0x7FC00002u;
  std::memcpy(n1.data(), &nan1, 4);
  std::memcpy(n2.data(), &nan2, 4);
  const std::vector<TensorBytesView> t = {
      view("+0", DType::kF32, {1}, a), view("-0", DType::kF32, {1}, b),
      view("nan1", DType::kF32, {1}, n1), view("nan2", DType::kF32, {1}, n2),
      view("nan1'", DType::kF32, {1}, n1)};
  auto r = deduplicate(t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.unique_storages, 4u);
  EXPECT_EQ(r->storage_of[4], r->storage_of[2]);
}

TEST(Dedup, ParallelFingerprintsGiveTheSameResult) {
  GlmAdapterOptions o;
  o.layers = 3;
  o.experts = 8;
  o.hidden = 64;
  o.moe_intermediate = 32;
  o.rank = 8;
  const AdapterFixture f = make_glm_shared_expert_adapter(o);
  ThreadPool pool(2);
  auto serial = deduplicate(f.tensors);
  auto parallel = deduplicate(f.tensors, &pool);
  ASSERT_TRUE(serial.ok() && parallel.ok());
  EXPECT_EQ(serial->storage_of, parallel->storage_of);
  EXPECT_EQ(serial->stats.keys, uint64_t(3 * (8 * 6 + 4)));
  EXPECT_EQ(serial->stats.unique_storages, uint64_t(3 * (6 + 4)));
  EXPECT_EQ(serial->stats.unique_storages, f.storages.size());
}

TEST(AdapterFixtures, DefaultShapesMatchTheIssue) {
  const AdapterFixture glm = make_glm_shared_expert_adapter();
  EXPECT_EQ(glm.tensors.size(), 11584u);
  EXPECT_EQ(glm.storages.size(), 160u);
  Qwen3AdapterOptions q;
  q.layers = 2;
  const AdapterFixture dense = make_qwen3_dense_adapter(q);
  auto r = deduplicate(dense.tensors);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stats.unique_storages, dense.tensors.size());
}

}  // namespace
}  // namespace weightcast
