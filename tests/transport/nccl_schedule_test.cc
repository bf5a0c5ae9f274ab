// The NCCL transport's broadcast schedule (transport/nccl/broadcast_schedule.h): manifest
// order, one root per bucket, parts split across full buckets, buffers alternating, and every
// byte of every part scheduled exactly once.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "transport/nccl/broadcast_schedule.h"

namespace weightcast::nccl {
namespace {

// Checks the invariants every schedule must hold; returns the bytes seen per part.
void expect_valid(const std::vector<SchedulePart>& parts, const ScheduleOptions& o,
                  const BroadcastSchedule& s) {
  std::vector<uint64_t> next(parts.size(), 0);  // each part's bytes arrive in order
  uint32_t last_part = 0;
  for (size_t k = 0; k < s.buckets.size(); ++k) {
    const Bucket& b = s.buckets[k];
    EXPECT_EQ(b.buffer, k % o.buffers);
    EXPECT_GT(b.bytes, 0u);
    EXPECT_LE(b.bytes, o.bucket_bytes);
    uint64_t at = 0;
    for (const BucketSegment& seg : b.segments) {
      EXPECT_EQ(parts[seg.part].owner, b.root) << "bucket " << k;
      EXPECT_EQ(seg.bucket_offset, at);
      EXPECT_EQ(seg.part_offset, next[seg.part]);
      EXPECT_GE(seg.part, last_part) << "manifest order";
      last_part = seg.part;
      next[seg.part] += seg.bytes;
      at += seg.bytes;
    }
    EXPECT_EQ(at, b.bytes);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(next[i], parts[i].bytes) << parts[i].name;
    total += parts[i].bytes;
  }
  EXPECT_EQ(s.total_bytes, total);
}

TEST(NcclSchedule, OneRootFillsBucketsAndSplitsParts) {
  const std::vector<SchedulePart> parts = {{"a", 600, 0}, {"b", 700, 0}, {"c", 100, 0}};
  ScheduleOptions o;
  o.bucket_bytes = 500;
  auto s = plan_broadcasts(parts, o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->buckets.size(), 3u);  // 1400 bytes in buckets of 500: 500, 500, 400
  EXPECT_EQ(s->buckets[0].bytes, 500u);
  EXPECT_EQ(s->buckets[1].bytes, 500u);
  EXPECT_EQ(s->buckets[2].bytes, 400u);
  ASSERT_EQ(s->buckets[1].segments.size(), 2u);  // the end of a, the start of b
  EXPECT_EQ(s->buckets[1].segments[0].part_offset, 500u);
  EXPECT_EQ(s->buckets[1].segments[1].part, 1u);
  EXPECT_EQ(s->buckets[1].segments[1].bytes, 400u);
  expect_valid(parts, o, *s);
}

TEST(NcclSchedule, AChangeOfOwnerStartsABucketEvenWhenOneReturns) {
  const std::vector<SchedulePart> parts = {
      {"a", 10, 0}, {"b", 10, 1}, {"c", 10, 0}, {"d", 10, 0}, {"e", 0, 1}};
  ScheduleOptions o;
  o.bucket_bytes = 1000;
  o.ranks = 2;
  auto s = plan_broadcasts(parts, o);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->buckets.size(), 3u);  // [a] from 0, [b] from 1, [c d] from 0; e is empty
  EXPECT_EQ(s->buckets[0].root, 0);
  EXPECT_EQ(s->buckets[1].root, 1);
  EXPECT_EQ(s->buckets[2].root, 0);
  EXPECT_EQ(s->buckets[2].bytes, 20u);
  expect_valid(parts, o, *s);
}

TEST(NcclSchedule, RandomManifestsKeepEveryInvariant) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    ScheduleOptions o;
    o.ranks = 1 + static_cast<int>(rng() % 4);
    o.bucket_bytes = 1 + rng() % 5000;
    o.buffers = 1 + static_cast<uint32_t>(rng() % 3);
    std::vector<SchedulePart> parts(rng() % 20);
    for (size_t i = 0; i < parts.size(); ++i) {
      parts[i] = {"p" + std::to_string(i), rng() % 12000, static_cast<int>(rng() % o.ranks)};
    }
    auto s = plan_broadcasts(parts, o);
    ASSERT_TRUE(s.ok());
    expect_valid(parts, o, *s);
  }
}

TEST(NcclSchedule, RefusesAnOwnerOutsideTheCommunicatorAndUnusableOptions) {
  ScheduleOptions o;
  o.ranks = 2;
  auto bad = plan_broadcasts({{"layers.3.mlp", 10, 2}}, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers.3.mlp"), std::string::npos);
  o.bucket_bytes = 0;
  EXPECT_FALSE(plan_broadcasts({}, o).ok());
  o.bucket_bytes = 10;
  o.buffers = 0;
  EXPECT_FALSE(plan_broadcasts({}, o).ok());
}

}  // namespace
}  // namespace weightcast::nccl
