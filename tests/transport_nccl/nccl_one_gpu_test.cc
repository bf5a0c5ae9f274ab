// The NCCL backend on one GPU. NCCL refuses two ranks of one communicator on one
// GPU, so what one GPU can prove is tested here: a one-rank communicator carries a version end
// to end (the publisher's part, bucketed through the schedule with two buffers, broadcast to
// itself, received into separate device memory, then decoded and applied on the GPU with the
// checksums equal to the record's targets); a communicator whose other rank never comes is
// aborted at its deadline instead of hanging; and, where the NCCL there accepts two ranks on
// one device, a real two-rank broadcast. Without a GPU or NCCL every test skips and says why.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "codec/cuda_codec.h"
#include "codec/delta_encoder.h"
#include "tests/codec/test_data.h"
#include "tests/transport_nccl/nccl_test_skip.h"
#include "transport/nccl/bucket_broadcaster.h"

namespace weightcast::nccl {
namespace {

using namespace std::chrono_literals;

struct DeviceBytes {
  explicit DeviceBytes(size_t n) : size(n) { EXPECT_EQ(cudaMalloc(&p, n + 1), cudaSuccess); }
  ~DeviceBytes() { cudaFree(p); }
  uint8_t* data() const { return static_cast<uint8_t*>(p); }
  void* p = nullptr;
  size_t size;
};

TEST(CudaNccl, OneRankCarriesAVersionThroughTheScheduleAndAppliesItOnTheGpu) {
  SKIP_WITHOUT_NCCL_GPU();
  auto id = NcclCommunicator::make_id();
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto comm = NcclCommunicator::join(*id, 1, 0, 0, 60s);
  ASSERT_TRUE(comm.ok()) << comm.status().message();

  // Three bf16 tensors and one part holding their delta records back to back.
  const size_t sizes[] = {300000, 70000, 1000003};
  std::vector<std::vector<uint8_t>> olds, news;
  std::vector<uint8_t> part;
  std::vector<size_t> record_at;
  for (size_t t = 0; t < 3; ++t) {
    olds.push_back(testing::random_bytes(sizes[t] * 2, 100 + t));
    news.push_back(testing::perturb(olds[t], 2, 0.01, 200 + t));
    EncodeOptions o;
    o.name = "layer" + std::to_string(t);
    o.dtype = DType::kBF16;
    auto enc = encode_delta(olds[t], news[t], o);
    ASSERT_TRUE(enc.ok());
    record_at.push_back(part.size());
    part.insert(part.end(), enc->record.begin(), enc->record.end());
  }
  DeviceBytes source(part.size()), received(part.size());
  ASSERT_EQ(cudaMemcpy(source.data(), part.data(), part.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemset(received.data(), 0xAB, part.size()), cudaSuccess);

  ScheduleOptions so;
  so.bucket_bytes = part.size() / 16 + 1;  // 16 full buckets and a short one: both buffers
  so.buffers = 2;
  auto schedule = plan_broadcasts({{"part-0", part.size(), 0}}, so);
  ASSERT_TRUE(schedule.ok());
  ASSERT_GT(schedule->buckets.size(), 10u);
  auto caster = BucketBroadcaster::create(comm->get(), so.bucket_bytes, so.buffers);
  ASSERT_TRUE(caster.ok()) << caster.status().message();

  std::vector<std::unique_ptr<DeviceBytes>> tensors;
  for (size_t t = 0; t < 3; ++t) {
    tensors.push_back(std::make_unique<DeviceBytes>(olds[t].size()));
    ASSERT_EQ(
        cudaMemcpy(tensors[t]->data(), olds[t].data(), olds[t].size(), cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  int applied = 0;
  const PartBuffers buffers[] = {{source.data(), received.data()}};
  Status s = (*caster)->run(
      *schedule, buffers,
      [&](uint32_t p) -> Status {
        EXPECT_EQ(p, 0u);
        // Decode and apply each record from the received device bytes; the host parses only the
        // header and chunk table of its own copy (what the manifest describes).
        for (size_t t = 0; t < 3; ++t) {
          auto view = parse_delta_record(std::span<const uint8_t>(part).subspan(record_at[t]));
          RETURN_IF_ERROR(view.status());
          TensorRef dest = TensorRef::contiguous("layer", DType::kBF16, tensors[t]->data(),
                                                 static_cast<int64_t>(sizes[t]));
          dest.memory = MemoryKind::kCuda;
          dest.device = 0;
          auto r = cuda_codec::apply_delta(*view, dest, {}, received.data() + record_at[t]);
          RETURN_IF_ERROR(r.status());
          EXPECT_EQ(r->checksum, view->header.target_checksum);
          ++applied;
        }
        return ok_status();
      },
      60s);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(applied, 3);
  std::vector<uint8_t> back(part.size());
  ASSERT_EQ(cudaMemcpy(back.data(), received.data(), part.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(back == part);
  for (size_t t = 0; t < 3; ++t) {
    std::vector<uint8_t> got(olds[t].size());
    ASSERT_EQ(cudaMemcpy(got.data(), tensors[t]->data(), got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(got == news[t]) << "tensor " << t;
  }
}

TEST(CudaNccl, ACommunicatorWhoseOtherRankNeverComesIsAbortedAtItsDeadline) {
  SKIP_WITHOUT_NCCL_GPU();
  auto id = NcclCommunicator::make_id();
  ASSERT_TRUE(id.ok());
  const auto start = std::chrono::steady_clock::now();
  auto comm = NcclCommunicator::join(*id, 2, 0, 0, 3s);  // rank 1 never joins
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded) << comm.status().message();
  EXPECT_NE(comm.status().message().find("nccl rank 0 of 2"), std::string::npos);
  EXPECT_LT(took, 30s) << "the abort must not outlive the deadline by much";
}

// Two ranks on one GPU: NCCL refuses this unless its build allows several ranks per device
// (NCCL_MULTI_RANK_GPU_ENABLE where supported); the test reports which happened.
TEST(CudaNccl, TwoRanksOnOneGpuBroadcastWhereNcclAllowsIt) {
  SKIP_WITHOUT_NCCL_GPU();
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  auto id = NcclCommunicator::make_id();
  ASSERT_TRUE(id.ok());
  Result<std::unique_ptr<NcclCommunicator>> comms[2] = {internal_error("unset"),
                                                        internal_error("unset")};
  std::thread peer([&] { comms[1] = NcclCommunicator::join(*id, 2, 1, 0, 20s); });
  comms[0] = NcclCommunicator::join(*id, 2, 0, 0, 20s);
  peer.join();
  if (!comms[0].ok() || !comms[1].ok()) {
    GTEST_SKIP() << "this NCCL refused two ranks on one GPU (what a one-GPU machine cannot "
                    "prove): rank 0: "
                 << comms[0].status().message() << "; rank 1: " << comms[1].status().message();
  }
  const size_t n = 8 << 20;
  DeviceBytes a(n), b(n);
  std::vector<uint8_t> payload = testing::random_bytes(n, 5);
  ASSERT_EQ(cudaMemcpy(a.data(), payload.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(b.data(), 0, n), cudaSuccess);
  cudaStream_t s0 = nullptr, s1 = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  Status st1;
  std::thread receiver([&] { st1 = (*comms[1])->broadcast(b.data(), n, 0, s1, 20s); });
  const Status st0 = (*comms[0])->broadcast(a.data(), n, 0, s0, 20s);
  receiver.join();
  ASSERT_TRUE(st0.ok()) << st0.message();
  ASSERT_TRUE(st1.ok()) << st1.message();
  std::vector<uint8_t> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), b.data(), n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(got == payload);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
}

TEST(NcclLibraryLoader, SaysWhereItLookedAndWhyEachCandidateFailed) {
  const std::string dir = ::testing::TempDir();
  const std::string not_a_library = dir + "/not_nccl.so";
  FILE* f = std::fopen(not_a_library.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not an ELF file", f);
  std::fclose(f);
  auto lib = open_nccl_from({dir + "/missing/libnccl.so.2", not_a_library});
  ASSERT_FALSE(lib.ok());
  const std::string& m = lib.status().message();
  EXPECT_NE(m.find("missing/libnccl.so.2"), std::string::npos) << m;
  EXPECT_NE(m.find("not_nccl.so"), std::string::npos) << m;
  EXPECT_NE(m.find("WEIGHTCAST_NCCL_LIBRARY"), std::string::npos) << m;
  // A real library that is not NCCL: loadable, but its symbols are missing.
  auto libc = open_nccl_from({"libc.so.6"});
  ASSERT_FALSE(libc.ok());
  EXPECT_NE(libc.status().message().find("lacks ncclGetVersion"), std::string::npos)
      << libc.status().message();
}

}  // namespace
}  // namespace weightcast::nccl
