// The NCCL broadcast group (nccl_broadcast_group.h) on one GPU. A one-rank group proves the
// round itself: host parts staged through the device in several buckets (an empty part among
// them), device parts used in place, the two mixed (pinned and managed memory included); a
// wrong span fails at once, breaks the group and stays; abort() makes every later call fail at
// once, also when it comes from another thread during a loop of rounds; a group whose other
// rank never joins fails at its deadline. Where the NCCL there accepts two ranks on one device
// (as in nccl_one_gpu_test.cc), a real two-rank round and an abort() from a third thread ending
// a broadcast that waits for a peer. Without a GPU or NCCL those tests skip and say why; the
// id and option checks need neither and run everywhere.
#include "transport/nccl/nccl_broadcast_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "codec/cuda_codec.h"
#include "tests/codec/test_data.h"
#include "tests/transport_nccl/nccl_test_skip.h"

namespace weightcast::nccl {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

struct DeviceBytes {
  explicit DeviceBytes(size_t n, bool managed = false) : size(n) {
    EXPECT_EQ(managed ? cudaMallocManaged(&p, n) : cudaMalloc(&p, n), cudaSuccess);
  }
  explicit DeviceBytes(const Bytes& b, bool managed = false) : DeviceBytes(b.size(), managed) {
    EXPECT_EQ(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(p); }
  uint8_t* data() const { return static_cast<uint8_t*>(p); }
  std::span<uint8_t> span() const { return {data(), size}; }
  Bytes read() const {
    Bytes b(size);
    EXPECT_EQ(cudaMemcpy(b.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
    return b;
  }
  void* p = nullptr;
  size_t size;
};

Result<std::unique_ptr<BroadcastGroup>> one_rank_group(uint64_t bucket_bytes) {
  NcclBroadcastGroupFactory factory({0, bucket_bytes, 2});
  ASSIGN_OR_RETURN(const std::string id, factory.make_id());
  return factory.join(id, 1, 0, deadline_in(60s));
}

// Joins ranks 0 and 1 on device 0 from two threads; false (with both errors) when refused.
bool join_two(std::unique_ptr<BroadcastGroup> (&groups)[2], uint64_t bucket_bytes,
              std::string* why) {
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  NcclBroadcastGroupFactory factory({0, bucket_bytes, 2});
  auto id = factory.make_id();
  if (!id.ok()) {
    *why = id.status().message();
    return false;
  }
  Result<std::unique_ptr<BroadcastGroup>> joined[2] = {internal_error("unset"),
                                                       internal_error("unset")};
  std::thread peer([&] { joined[1] = factory.join(*id, 2, 1, deadline_in(20s)); });
  joined[0] = factory.join(*id, 2, 0, deadline_in(20s));
  peer.join();
  if (!joined[0].ok() || !joined[1].ok()) {
    *why = "rank 0: " + joined[0].status().message() + "; rank 1: " + joined[1].status().message();
    return false;
  }
  groups[0] = std::move(*joined[0]);
  groups[1] = std::move(*joined[1]);
  return true;
}

// Destroys both members at once: a healthy communicator's finalize may wait for its peer's.
void destroy_two(std::unique_ptr<BroadcastGroup> (&groups)[2]) {
  std::thread peer([&] { groups[1].reset(); });
  groups[0].reset();
  peer.join();
}

TEST(NcclBroadcastGroupFactory, RefusesAnIdThatIsNotAnNcclUniqueIdAndOptionsThatCannotWork) {
  NcclBroadcastGroupFactory factory;
  EXPECT_EQ(factory.name(), "nccl");
  EXPECT_EQ(factory.options().bucket_bytes, uint64_t{1} << 30);
  EXPECT_EQ(factory.options().buffers, 2u);
  auto g = factory.join("not an id", 4, 3, deadline_in(1s));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("nccl group of 4, rank 3"), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("has 9 bytes, an ncclUniqueId has 128"), std::string::npos)
      << g.status().message();
  NcclBroadcastGroupFactory no_buffers({0, 1 << 20, 0});
  auto h = no_buffers.join(std::string(128, '\0'), 2, 0, deadline_in(1s));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("buffers (0)"), std::string::npos) << h.status().message();
}

TEST(CudaNcclBroadcastGroup, OneRankCarriesHostPartsThroughDeviceStagingInSeveralBuckets) {
  SKIP_WITHOUT_NCCL_GPU();
  const uint64_t bucket = 64 << 10;
  auto group = one_rank_group(bucket);
  ASSERT_TRUE(group.ok()) << group.status().message();
  EXPECT_EQ((*group)->rank(), 0);
  EXPECT_EQ((*group)->size(), 1);
  const std::vector<SchedulePart> parts = {
      {"a", 100000, 0}, {"empty", 0, 0}, {"b", 250001, 0}, {"c", 7, 0}};
  auto schedule = plan_broadcasts(parts, {bucket, 2, 1});
  ASSERT_TRUE(schedule.ok());
  ASSERT_GT(schedule->buckets.size(), 4u);  // both staging buffers, parts split across buckets
  for (uint64_t round = 0; round < 2; ++round) {  // the second reuses the broadcaster
    std::vector<Bytes> in, out;
    std::vector<std::span<const uint8_t>> sources;
    std::vector<std::span<uint8_t>> destinations;
    for (size_t i = 0; i < parts.size(); ++i) {
      in.push_back(testing::random_bytes(parts[i].bytes, 10 * round + i));
      out.push_back(Bytes(parts[i].bytes, 0xAB));
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      sources.emplace_back(in[i]);
      destinations.emplace_back(out[i]);
    }
    const Status s = (*group)->broadcast(parts, sources, destinations, deadline_in(60s));
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < parts.size(); ++i) EXPECT_TRUE(out[i] == in[i]) << "part " << i;
  }
}

TEST(CudaNcclBroadcastGroup, OneRankBroadcastsDevicePartsInPlace) {
  SKIP_WITHOUT_NCCL_GPU();
  auto group = one_rank_group(1 << 20);
  ASSERT_TRUE(group.ok()) << group.status().message();
  const Bytes a = testing::random_bytes(3000001, 1), b = testing::random_bytes(65536, 2);
  DeviceBytes src_a(a), dst_a(a.size()), src_b(b);
  ASSERT_EQ(cudaMemset(dst_a.data(), 0, a.size()), cudaSuccess);
  const std::vector<SchedulePart> parts = {{"a", a.size(), 0}, {"b", b.size(), 0}};
  const std::span<const uint8_t> sources[] = {src_a.span(), src_b.span()};
  const std::span<uint8_t> destinations[] = {dst_a.span(), src_b.span()};  // b: in place
  const Status s = (*group)->broadcast(parts, sources, destinations, deadline_in(60s));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(dst_a.read() == a);
  EXPECT_TRUE(src_a.read() == a);
  EXPECT_TRUE(src_b.read() == b);
}

TEST(CudaNcclBroadcastGroup, OneRankMixesHostDevicePinnedAndManagedParts) {
  SKIP_WITHOUT_NCCL_GPU();
  auto group = one_rank_group(256 << 10);
  ASSERT_TRUE(group.ok()) << group.status().message();
  std::vector<Bytes> in;
  for (uint64_t i = 0; i < 6; ++i) in.push_back(testing::random_bytes(200000 + 4099 * i, 30 + i));
  DeviceBytes dev_dst0(in[0].size()), dev_src1(in[1]), managed_src2(in[2], /*managed=*/true);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, in[4].size()), cudaSuccess);
  std::memcpy(pinned, in[4].data(), in[4].size());
  Bytes host_dst1(in[1].size()), host_dst2(in[2].size()), host_dst4(in[4].size());
  Bytes in_place5 = in[5];
  std::vector<SchedulePart> parts;
  for (size_t i = 0; i < in.size(); ++i)
    parts.push_back({"p" + std::to_string(i), in[i].size(), 0});
  const std::span<const uint8_t> sources[] = {in[0],
                                              dev_src1.span(),
                                              managed_src2.span(),
                                              in[3],
                                              {static_cast<const uint8_t*>(pinned), in[4].size()},
                                              in_place5};
  const std::span<uint8_t> destinations[] = {dev_dst0.span(), host_dst1, host_dst2, {},
                                             host_dst4,       in_place5};  // part 3: not wanted
  const Status s = (*group)->broadcast(parts, sources, destinations, deadline_in(60s));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(dev_dst0.read() == in[0]) << "host -> device";
  EXPECT_TRUE(host_dst1 == in[1]) << "device -> host";
  EXPECT_TRUE(host_dst2 == in[2]) << "managed -> host";
  EXPECT_TRUE(host_dst4 == in[4]) << "pinned -> host";
  EXPECT_TRUE(in_place5 == in[5]) << "host in place";
  cudaFreeHost(pinned);
}

TEST(CudaNcclBroadcastGroup, OneRankRejectsAWrongDestinationSizeAtOnceAndStaysBroken) {
  SKIP_WITHOUT_NCCL_GPU();
  auto group = one_rank_group(1 << 20);
  ASSERT_TRUE(group.ok()) << group.status().message();
  const Bytes a = testing::random_bytes(1000, 1), b = testing::random_bytes(5000, 2);
  Bytes short_b(b.size() - 1), ok_a(a.size()), ok_b(b.size());
  const std::vector<SchedulePart> parts = {{"a", a.size(), 0}, {"b", b.size(), 0}};
  const std::span<const uint8_t> sources[] = {a, b};
  const std::span<uint8_t> wrong[] = {ok_a, short_b};
  const auto start = std::chrono::steady_clock::now();
  const Status s = (*group)->broadcast(parts, sources, wrong, deadline_in(60s));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nccl group of 1, rank 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("part 1 'b' (5000 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("destination of 4999 bytes"), std::string::npos) << s.message();
  // Sticky: a correct round on the broken group fails at once with the first error.
  const std::span<uint8_t> right[] = {ok_a, ok_b};
  const Status again = (*group)->broadcast(parts, sources, right, deadline_in(60s));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.code(), StatusCode::kUnavailable) << again.to_string();
  EXPECT_NE(again.message().find("destination of 4999 bytes"), std::string::npos)
      << again.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(ok_b == Bytes(b.size(), 0));

  // An owner outside the group is refused by the schedule, naming the part.
  auto other = one_rank_group(1 << 20);
  ASSERT_TRUE(other.ok()) << other.status().message();
  const std::vector<SchedulePart> foreign = {{"theirs", 10, 1}};
  const std::span<const uint8_t> none[] = {{}};
  const std::span<uint8_t> nowhere[] = {{}};
  const Status f = (*other)->broadcast(foreign, none, nowhere, deadline_in(60s));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("theirs"), std::string::npos) << f.message();
}

TEST(CudaNcclBroadcastGroup, OneRankAbortThenBroadcastFailsAtOnceAndStays) {
  SKIP_WITHOUT_NCCL_GPU();
  auto group = one_rank_group(1 << 20);
  ASSERT_TRUE(group.ok()) << group.status().message();
  (*group)->abort("the epoch ended");
  (*group)->abort("a second abort changes nothing");
  const Bytes a = testing::random_bytes(1000, 1);
  Bytes out(a.size());
  const std::vector<SchedulePart> parts = {{"a", a.size(), 0}};
  const std::span<const uint8_t> sources[] = {a};
  const std::span<uint8_t> destinations[] = {out};
  for (int i = 0; i < 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Status s = (*group)->broadcast(parts, sources, destinations, deadline_in(60s));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("the epoch ended"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find("second abort"), std::string::npos) << s.message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  }
}

TEST(CudaNcclBroadcastGroup, OneRankAbortFromAnotherThreadStopsALoopOfRounds) {
  SKIP_WITHOUT_NCCL_GPU();
  auto group = one_rank_group(1 << 20);
  ASSERT_TRUE(group.ok()) << group.status().message();
  const Bytes a = testing::random_bytes(16 << 20, 3);
  DeviceBytes src(a), dst(a.size());
  Bytes host_out(a.size());
  const std::vector<SchedulePart> parts = {{"dev", a.size(), 0}, {"host", a.size(), 0}};
  const std::span<const uint8_t> sources[] = {src.span(), a};
  const std::span<uint8_t> destinations[] = {dst.span(), host_out};
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    (*group)->abort("stopped by the test's other thread");
  });
  const auto start = std::chrono::steady_clock::now();
  Status s;
  int rounds = 0;
  while (s.ok() && std::chrono::steady_clock::now() - start < 20s) {
    s = (*group)->broadcast(parts, sources, destinations, deadline_in(20s));
    if (s.ok()) ++rounds;
  }
  aborter.join();
  ASSERT_FALSE(s.ok()) << "the loop ran 20 s after the abort";
  EXPECT_NE(s.message().find("stopped by the test's other thread"), std::string::npos)
      << s.message();
  std::printf("rounds before the abort: %d\n", rounds);
}

TEST(CudaNcclBroadcastGroup, AGroupWhoseOtherRankNeverComesFailsAtItsDeadline) {
  SKIP_WITHOUT_NCCL_GPU();
  NcclBroadcastGroupFactory factory({0, 1 << 20, 2});
  auto id = factory.make_id();
  ASSERT_TRUE(id.ok()) << id.status().message();
  const auto start = std::chrono::steady_clock::now();
  auto group = factory.join(*id, 2, 0, deadline_in(2s));  // rank 1 never joins
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), StatusCode::kDeadlineExceeded) << group.status().message();
  EXPECT_NE(group.status().message().find("rank 0 of 2"), std::string::npos)
      << group.status().message();
  EXPECT_LT(took, 30s) << "the abort must not outlive the deadline by much";
}

TEST(CudaNcclBroadcastGroup, TwoRanksOnOneGpuBroadcastEachOthersPartsWhereNcclAllowsIt) {
  SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<BroadcastGroup> g[2];
  std::string why;
  if (!join_two(g, 64 << 10, &why)) {
    GTEST_SKIP() << "this NCCL refused two ranks on one GPU (what a one-GPU machine cannot "
                    "prove): "
                 << why;
  }
  // Parts alternate owners, host and device; every rank wants every part.
  const std::vector<SchedulePart> parts = {
      {"r0-host", 300001, 0}, {"r1-dev", 1 << 20, 1}, {"r0-dev", 70000, 0}, {"r1-host", 5, 1}};
  std::vector<Bytes> in;
  for (size_t i = 0; i < parts.size(); ++i) in.push_back(testing::random_bytes(parts[i].bytes, i));
  DeviceBytes src1(in[1]), src2(in[2]);
  DeviceBytes own0(in[2].size()), own1(in[1].size());  // each rank's own part, elsewhere on GPU
  std::vector<Bytes> host_out[2];
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < parts.size(); ++i) host_out[r].push_back(Bytes(parts[i].bytes));
  }
  Status st[2];
  auto member = [&](int r) {
    std::vector<std::span<const uint8_t>> sources(parts.size());
    std::vector<std::span<uint8_t>> destinations;
    for (size_t i = 0; i < parts.size(); ++i) destinations.emplace_back(host_out[r][i]);
    if (r == 0) {
      sources[0] = in[0];
      sources[2] = src2.span();
      destinations[2] = own0.span();
    } else {
      sources[1] = src1.span();
      sources[3] = in[3];
      destinations[1] = own1.span();
    }
    st[r] = g[r]->broadcast(parts, sources, destinations, deadline_in(30s));
  };
  std::thread peer(member, 1);
  member(0);
  peer.join();
  ASSERT_TRUE(st[0].ok()) << st[0].message();
  ASSERT_TRUE(st[1].ok()) << st[1].message();
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < parts.size(); ++i) {
      if ((r == 0 && i == 2) || (r == 1 && i == 1)) continue;  // into device memory
      EXPECT_TRUE(host_out[r][i] == in[i]) << "rank " << r << " part " << i;
    }
  }
  EXPECT_TRUE(own0.read() == in[2]);
  EXPECT_TRUE(own1.read() == in[1]);
  destroy_two(g);
}

TEST(CudaNcclBroadcastGroup, TwoRanksOnOneGpuAbortFromAnotherThreadEndsAWaitingBroadcast) {
  SKIP_WITHOUT_NCCL_GPU();
  std::unique_ptr<BroadcastGroup> g[2];
  std::string why;
  if (!join_two(g, 1 << 20, &why)) {
    GTEST_SKIP() << "this NCCL refused two ranks on one GPU (what a one-GPU machine cannot "
                    "prove): "
                 << why;
  }
  // Rank 0 waits for a part of rank 1, which never broadcasts; a third thread aborts rank 0.
  const std::vector<SchedulePart> parts = {{"from-rank-1", 1 << 20, 1}};
  DeviceBytes out(parts[0].bytes);
  const std::span<const uint8_t> sources[] = {{}};
  const std::span<uint8_t> destinations[] = {out.span()};
  std::thread aborter([&] {
    std::this_thread::sleep_for(300ms);
    g[0]->abort("the coordinator ended the epoch");
  });
  const auto start = std::chrono::steady_clock::now();
  const Status s = g[0]->broadcast(parts, sources, destinations, deadline_in(60s));
  const auto took = std::chrono::steady_clock::now() - start;
  aborter.join();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the coordinator ended the epoch"), std::string::npos) << s.message();
  EXPECT_LT(took, 15s) << "the abort must end the wait, not the 60 s deadline";
  const Status again = g[0]->broadcast(parts, sources, destinations, deadline_in(60s));
  EXPECT_EQ(again.code(), StatusCode::kUnavailable) << again.to_string();
  destroy_two(g);
}

}  // namespace
}  // namespace weightcast::nccl
