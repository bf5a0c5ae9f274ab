// The CUDA copy executor on a real GPU: skipped, with the reason, where there is
// none (CI builds it anyway). On an H200: device-to-pinned staging of the eight-expert
// fixture, 48 requests in 6 transfers, bytes identical to the sources; and cancellation
// mid-plan (while enqueueing, and while waiting) frees the pinned staging at once.
#include <gtest/gtest.h>

#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include "codec/copy_planner.h"
#include "transport/copy_executor_cuda.h"

namespace weightcast {
namespace {

TEST(CudaCopyExecutor, EightExpertsSixTransfersIdenticalBytes) {
  std::string why;
  if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  constexpr uint32_t kSources = 6, kExperts = 8;
  constexpr uint64_t kExpertBytes = 4096;
  std::vector<std::vector<uint8_t>> host(kSources, std::vector<uint8_t>(kExperts * kExpertBytes));
  std::vector<uint8_t*> device(kSources, nullptr);
  std::vector<CopyRequest> requests;
  for (uint32_t s = 0; s < kSources; ++s) {
    for (size_t i = 0; i < host[s].size(); ++i) host[s][i] = static_cast<uint8_t>(i * 7 + s);
    ASSERT_EQ(cudaMalloc(&device[s], host[s].size()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device[s], host[s].data(), host[s].size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    for (uint32_t e = 0; e < kExperts; ++e) {
      requests.push_back({"s" + std::to_string(s) + ".e" + std::to_string(e),
                          s,
                          kExperts * kExpertBytes,
                          e * kExpertBytes,
                          kExpertBytes,
                          DType::kF32,
                          {1024}});
    }
  }
  const CopyPlan plan = plan_copies(requests);
  ASSERT_EQ(plan.transfers.size(), 6u);
  std::vector<const uint8_t*> sources(device.begin(), device.end());
  auto staged = execute_copy_plan_cuda(plan, requests, sources, 0);
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  ASSERT_TRUE((*staged)->wait(std::chrono::seconds(10)).ok());
  EXPECT_EQ((*staged)->transfer_calls(), 6u);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    EXPECT_EQ(0, std::memcmp((*staged)->slice(i).data(), host[r.source].data() + r.offset, r.bytes))
        << r.name;
  }
  for (uint8_t* p : device) cudaFree(p);
}

// `kTransfers` device buffers of `kBytes`, one whole-buffer request each: one transfer each.
struct DeviceSources {
  static constexpr size_t kTransfers = 16;
  static constexpr uint64_t kBytes = uint64_t{32} << 20;
  std::vector<uint8_t*> device;
  std::vector<CopyRequest> requests;
  CopyPlan plan;

  DeviceSources() {
    for (uint32_t s = 0; s < kTransfers; ++s) {
      uint8_t* p = nullptr;
      EXPECT_EQ(cudaMalloc(&p, kBytes), cudaSuccess);
      EXPECT_EQ(cudaMemset(p, static_cast<int>(s + 1), kBytes), cudaSuccess);
      device.push_back(p);
      requests.push_back({"t" + std::to_string(s),
                          s,
                          kBytes,
                          0,
                          kBytes,
                          DType::kU8,
                          {static_cast<int64_t>(kBytes)}});
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    plan = plan_copies(requests);
  }
  ~DeviceSources() {
    for (uint8_t* p : device) cudaFree(p);
  }
  std::vector<const uint8_t*> sources() const { return {device.begin(), device.end()}; }
};

TEST(CudaCopyExecutor, CancelMidPlanFreesPinnedStaging) {
  std::string why;
  if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  DeviceSources d;
  ASSERT_EQ(d.plan.transfers.size(), DeviceSources::kTransfers);
  const uint64_t before = cuda_pinned_staging_bytes();
  // Cancel from another thread once two transfers' staging is pinned: the executor is then
  // inside the plan (pinning 32 MiB takes milliseconds; it checks the token per transfer).
  CancelToken cancel;
  std::atomic<bool> stop{false};
  std::thread canceller([&] {
    while (!stop.load()) {
      if (cuda_pinned_staging_bytes() >= before + 2 * DeviceSources::kBytes) {
        cancel.cancelled = true;
        return;
      }
      std::this_thread::yield();
    }
  });
  auto staged = execute_copy_plan_cuda(d.plan, d.requests, d.sources(), 0, &cancel);
  stop = true;
  canceller.join();
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  const size_t enqueued = (*staged)->transfer_calls();
  std::cout << "cancelled after " << enqueued << " of " << DeviceSources::kTransfers
            << " transfers were enqueued\n";
  EXPECT_GE(enqueued, 2u);
  EXPECT_LT(enqueued, DeviceSources::kTransfers);  // mid-plan, not after it
  const Status waited = (*staged)->wait(std::chrono::seconds(10));
  EXPECT_EQ(waited.code(), StatusCode::kFailedPrecondition) << waited.to_string();
  EXPECT_NE(waited.message().find("cancelled"), std::string::npos) << waited.to_string();
  // Freed at cancellation, before the result is destroyed.
  EXPECT_EQ((*staged)->pinned_bytes(), 0u);
  EXPECT_EQ(cuda_pinned_staging_bytes(), before);
  staged = internal_error("destroyed");
  EXPECT_EQ(cuda_pinned_staging_bytes(), before);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaCopyExecutor, CancelWhileWaitingFreesPinnedStagingButNotAfterSuccess) {
  std::string why;
  if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  DeviceSources d;
  const uint64_t before = cuda_pinned_staging_bytes();
  CancelToken cancel;
  auto staged = execute_copy_plan_cuda(d.plan, d.requests, d.sources(), 0, &cancel);
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  EXPECT_EQ((*staged)->transfer_calls(), DeviceSources::kTransfers);
  EXPECT_EQ(cuda_pinned_staging_bytes(),
            before + DeviceSources::kTransfers * DeviceSources::kBytes);
  cancel.cancelled = true;  // before wait() reported success: the plan is cancelled
  const Status waited = (*staged)->wait(std::chrono::seconds(10));
  EXPECT_EQ(waited.code(), StatusCode::kFailedPrecondition) << waited.to_string();
  EXPECT_EQ((*staged)->pinned_bytes(), 0u);
  EXPECT_EQ(cuda_pinned_staging_bytes(), before);

  CancelToken late;
  auto done = execute_copy_plan_cuda(d.plan, d.requests, d.sources(), 0, &late);
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE((*done)->wait(std::chrono::seconds(10)).ok());
  late.cancelled = true;  // after success: changes nothing
  EXPECT_TRUE((*done)->wait(std::chrono::seconds(10)).ok());
  EXPECT_EQ((*done)->pinned_bytes(), DeviceSources::kTransfers * DeviceSources::kBytes);
  EXPECT_EQ((*done)->slice(5)[0], 6);
  EXPECT_EQ((*done)->slice(5)[DeviceSources::kBytes - 1], 6);
}

}  // namespace
}  // namespace weightcast

#else

TEST(CudaCopyExecutor, EightExpertsSixTransfersIdenticalBytes) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}
TEST(CudaCopyExecutor, CancelMidPlanFreesPinnedStaging) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}
TEST(CudaCopyExecutor, CancelWhileWaitingFreesPinnedStagingButNotAfterSuccess) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}

#endif
