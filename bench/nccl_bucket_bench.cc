// The NCCL schedule's overhead over bare ncclBroadcast calls of the same buckets:
//
//   nccl_bucket_bench [--bytes N] [--bucket-bytes B] [--repetitions R] [--help]
//
// Two ranks (threads of this process): on GPUs 0 and 1 where the machine has two, else both on
// GPU 0 when the NCCL there accepts that, else one rank (then a broadcast moves nothing between
// ranks and only the schedule's own copies are measured; the JSON says which). Times (median of R,
// after one warm-up):
//   bare      for each bucket of the schedule, one ncclBroadcast of that many bytes from one
//             buffer (what a framework's bucketed broadcast does)
//   schedule  BucketBroadcaster::run over the same parts: gather on the root, broadcast,
//             copy out on the receivers, parts handed on as they complete
// and prints one JSON object with the ratio bare_s / schedule_s (>= 0.9 is the target).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "transport/nccl/bucket_broadcaster.h"

namespace {

using namespace weightcast;
using namespace weightcast::nccl;
using Clock = std::chrono::steady_clock;

struct RankState {
  std::unique_ptr<NcclCommunicator> comm;
  std::unique_ptr<BucketBroadcaster> caster;
  uint8_t* parts = nullptr;     // the version's bytes (the root's source)
  uint8_t* received = nullptr;  // where a receiver puts them
  uint8_t* bare = nullptr;      // one bucket for the bare loop
  cudaStream_t stream = nullptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t bytes = uint64_t{4} << 30, bucket = uint64_t{1} << 30;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::puts(
          "usage: nccl_bucket_bench [--bytes N] [--bucket-bytes B] [--repetitions R]\n"
          "The broadcast schedule against bare ncclBroadcast calls of the same buckets on\n"
          "this machine's GPU 0; prints JSON (see the source).");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "nccl_bucket_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--bytes")
      bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--bucket-bytes")
      bucket = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--repetitions")
      reps = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "nccl_bucket_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto lib = load_nccl();
  if (!lib.ok()) return std::fprintf(stderr, "%s\n", lib.status().message().c_str()), 1;
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  auto id = NcclCommunicator::make_id();
  if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().message().c_str()), 1;

  // Two ranks: rank r on GPU r where there are two, else both on GPU 0 if NCCL takes that.
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  const auto device_of = [&](int r) { return gpus >= 2 ? r : 0; };
  int ranks = 2;
  std::vector<RankState> st(2);
  {
    Result<std::unique_ptr<NcclCommunicator>> c1 = internal_error("unset");
    std::thread t(
        [&] { c1 = NcclCommunicator::join(*id, 2, 1, device_of(1), std::chrono::seconds(20)); });
    auto c0 = NcclCommunicator::join(*id, 2, 0, 0, std::chrono::seconds(20));
    t.join();
    if (c0.ok() && c1.ok()) {
      st[0].comm = std::move(*c0);
      st[1].comm = std::move(*c1);
    } else {
      ranks = 1;
      std::fprintf(stderr, "two ranks on %s refused (%s); measuring one rank\n",
                   gpus >= 2 ? "two GPUs" : "one GPU",
                   (c0.ok() ? c1 : c0).status().message().c_str());
      auto id1 = NcclCommunicator::make_id();
      auto c = id1.ok() ? NcclCommunicator::join(*id1, 1, 0, 0, std::chrono::seconds(20))
                        : Result<std::unique_ptr<NcclCommunicator>>(id1.status());
      if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().message().c_str()), 1;
      st[0].comm = std::move(*c);
    }
  }
  ScheduleOptions so;
  so.bucket_bytes = bucket;
  so.buffers = 2;
  so.ranks = ranks;
  std::vector<SchedulePart> parts;
  for (uint64_t at = 0, k = 0; at < bytes; at += bucket / 3 + 1, ++k) {  // parts that straddle
    parts.push_back({"part" + std::to_string(k), std::min(bucket / 3 + 1, bytes - at), 0});
  }
  auto schedule = plan_broadcasts(parts, so);
  if (!schedule.ok()) return std::fprintf(stderr, "%s\n", schedule.status().message().c_str()), 1;
  for (int r = 0; r < ranks; ++r) {
    cudaSetDevice(device_of(r));
    if (cudaMalloc(&st[r].parts, bytes) != cudaSuccess ||
        cudaMalloc(&st[r].received, bytes) != cudaSuccess ||
        cudaMalloc(&st[r].bare, bucket) != cudaSuccess ||
        cudaStreamCreate(&st[r].stream) != cudaSuccess) {
      return std::fprintf(stderr, "cuda allocation failed\n"), 1;
    }
    cudaMemset(st[r].parts, r + 1, bytes);
    auto caster = BucketBroadcaster::create(st[r].comm.get(), bucket, 2);
    if (!caster.ok()) return std::fprintf(stderr, "%s\n", caster.status().message().c_str()), 1;
    st[r].caster = std::move(*caster);
  }
  // Runs `fn(rank)` on every rank at once; returns the slowest rank's seconds, or -1.
  auto all_ranks = [&](auto fn) {
    std::vector<double> took(ranks, 0);
    std::vector<Status> s(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        cudaSetDevice(device_of(r));
        const auto a = Clock::now();
        s[r] = fn(r);
        took[r] = std::chrono::duration<double>(Clock::now() - a).count();
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) {
      if (!s[r].ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, s[r].message().c_str());
        return -1.0;
      }
    }
    return *std::max_element(took.begin(), took.end());
  };
  auto bare = [&](int r) -> Status {
    for (const Bucket& b : schedule->buckets) {
      RETURN_IF_ERROR(st[r].comm->broadcast(st[r].bare, b.bytes, b.root, st[r].stream,
                                            std::chrono::seconds(60)));
    }
    return ok_status();
  };
  auto scheduled = [&](int r) -> Status {
    std::vector<PartBuffers> buffers(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      uint64_t at = 0;
      for (size_t j = 0; j < i; ++j) at += parts[j].bytes;
      // The root publishes; it receives its own bytes only when it is the only rank.
      buffers[i] = {r == 0 ? st[r].parts + at : nullptr,
                    r == 0 && ranks > 1 ? nullptr : st[r].received + at};
    }
    return st[r].caster->run(
        *schedule, buffers, [](uint32_t) { return ok_status(); }, std::chrono::seconds(120));
  };
  std::vector<double> t_bare, t_sched;
  for (int i = 0; i < reps + 1; ++i) {  // the first round warms up
    const double b = all_ranks(bare), s = all_ranks(scheduled);
    if (b < 0 || s < 0) return 1;
    if (i > 0) {
      t_bare.push_back(b);
      t_sched.push_back(s);
    }
  }
  const double bare_s = median(t_bare), sched_s = median(t_sched);
  std::printf("{\n  \"nccl_version\": %d,\n  \"ranks\": %d,\n  \"bytes\": %llu,\n", (*lib)->version,
              ranks, static_cast<unsigned long long>(bytes));
  std::printf("  \"bucket_bytes\": %llu,\n  \"buckets\": %zu,\n  \"parts\": %zu,\n",
              static_cast<unsigned long long>(bucket), schedule->buckets.size(), parts.size());
  std::printf("  \"bare_broadcast_s\": %.6f,\n  \"schedule_s\": %.6f,\n", bare_s, sched_s);
  std::printf("  \"bare_over_schedule\": %.3f,\n  \"gpus\": %d,\n", bare_s / sched_s, gpus);
  std::printf("  \"note\": \"%s\"\n}\n",
              ranks == 2 && gpus >= 2
                  ? "two ranks on two GPUs of one machine: broadcasts cross between them; "
                    "no network fabric is measured"
              : ranks == 2 ? "two ranks on one GPU: broadcasts move bytes between two buffers of "
                             "one device; NVLink/IB fabrics are not measured"
                           : "one rank: a broadcast moves nothing; the ratio only shows the "
                             "schedule's own copies, not fabric overhead");
  for (int r = 0; r < ranks; ++r) {
    st[r].caster.reset();
    cudaFree(st[r].parts);
    cudaFree(st[r].received);
    cudaFree(st[r].bare);
    cudaStreamDestroy(st[r].stream);
  }
  return 0;
}
