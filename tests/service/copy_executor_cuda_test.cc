// The CUDA copy executor on a real GPU (issue 4): skipped, with the reason, where there is
// none (CI builds it anyway). On an H200: device-to-pinned staging of the eight-expert
// fixture, 48 requests in 6 transfers, bytes identical to the sources.
#include <gtest/gtest.h>

#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>

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

}  // namespace
}  // namespace weightcast

#else

TEST(CudaCopyExecutor, EightExpertsSixTransfersIdenticalBytes) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}

#endif
