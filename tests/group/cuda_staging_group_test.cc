// The endpoints with tensors in CUDA memory, in one process against a coordinator thread.
// On a GPU: the trainer's packed halves and vector live on the device, are journaled, and
// reach device tensors of a live subscriber and of a late one catching up from the journal
// (bytes read back equal). Wherever the CUDA toolkit is built in: a CUDA tensor that cannot
// be read fails its version, naming the tensor; one that cannot be written is nacked and the
// engine keeps its version. Without the toolkit: CUDA tensors are refused at registration.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "src/endpoint/publisher.h"
#include "src/endpoint/subscriber.h"
#include "tests/group/group_harness.h"
#include "tests/group/trainer_side.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>

#include "transport/copy_executor_cuda.h"
#endif

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

// A view of host memory claiming to be on CUDA device 99: no usable device has that ordinal.
TensorRef on_missing_device(std::string name, std::vector<uint16_t>& host) {
  TensorRef ref = TensorRef::contiguous(std::move(name), DType::kBF16, host.data(),
                                        static_cast<int64_t>(host.size()));
  ref.memory = MemoryKind::kCuda;
  ref.device = 99;
  return ref;
}

#if WEIGHTCAST_HAVE_CUDA

TEST(CudaStagingEndpoints, UnreadableCudaTensorFailsTheVersion) {
  GroupSpec spec;
  spec.subscribers = 1;
  TestGroup g(spec);
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  std::vector<uint16_t> host(64, 1);
  ASSERT_TRUE(t.publisher->register_tensor(on_missing_device("gpu.unreadable", host)).ok());
  t.trainer.set(0);
  auto h = t.publisher->publish(0);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  const Status reads = h->wait_for_reads(in(seconds(20)));
  ASSERT_FALSE(reads.ok());
  EXPECT_NE(reads.message().find("'gpu.unreadable'"), std::string::npos) << reads.message();
  EXPECT_NE(reads.message().find("version 0"), std::string::npos) << reads.message();
  EXPECT_FALSE(h->wait_published(in(seconds(20))).ok());
  EXPECT_EQ(t.publisher->head(), std::nullopt);  // nothing journaled
}

TEST(CudaStagingEndpoints, UnwritableCudaTensorIsNacked) {
  GroupSpec spec;
  spec.subscribers = 1;
  TestGroup g(spec);
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  std::mutex mu;
  std::vector<std::string> logs;
  SubscriberOptions so = one_thread<SubscriberOptions>(2);
  so.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> l(mu);
    logs.push_back(line);
  };
  auto subscriber = Subscriber::create(g.config(), so);
  ASSERT_TRUE(subscriber.ok());
  Weights engine;
  std::vector<TensorRef> refs = engine.refs();
  refs[2] = on_missing_device("vec", engine.vec);  // same name and shape as the trainer's
  for (const auto& r : refs) ASSERT_TRUE((*subscriber)->register_tensor(r).ok()) << r.name;
  ASSERT_TRUE((*subscriber)->connect().ok());
  t.trainer.set(0);
  auto h = t.publisher->publish(0);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h->wait_published(in(seconds(20))).ok());
  ASSERT_TRUE(eventually([&] { return (*subscriber)->stats().nacks >= 1; }, seconds(20)));
  EXPECT_EQ((*subscriber)->current_version(), std::nullopt);
  std::lock_guard<std::mutex> l(mu);
  bool named = false;
  for (const auto& line : logs) {
    named = named || (line.find("cannot reach v0") != std::string::npos &&
                      line.find("'vec'") != std::string::npos);
  }
  EXPECT_TRUE(named) << "no log line names the tensor; first: " << (logs.empty() ? "" : logs[0]);
}

// Device copies of a Weights: the same views, in CUDA memory of device 0.
struct DeviceWeights {
  uint16_t* packed = nullptr;
  uint16_t* vec = nullptr;
  DeviceWeights() {
    EXPECT_EQ(cudaMalloc(&packed, 4 * 64 * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&vec, 1000 * 2), cudaSuccess);
    EXPECT_EQ(cudaMemset(packed, 0xff, 4 * 64 * 2), cudaSuccess);
    EXPECT_EQ(cudaMemset(vec, 0xff, 1000 * 2), cudaSuccess);
  }
  ~DeviceWeights() {
    cudaFree(packed);
    cudaFree(vec);
  }
  void upload(const Weights& w) {
    EXPECT_EQ(cudaMemcpy(packed, w.packed.data(), 4 * 64 * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(vec, w.vec.data(), 1000 * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  Weights download() const {
    Weights w;
    EXPECT_EQ(cudaMemcpy(w.packed.data(), packed, 4 * 64 * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(w.vec.data(), vec, 1000 * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return w;
  }
  std::vector<TensorRef> refs() {
    Weights shape;
    std::vector<TensorRef> r = shape.refs();
    for (auto& ref : r) {
      ref.data = ref.name == "vec" ? static_cast<void*>(vec) : static_cast<void*>(packed);
      ref.memory = MemoryKind::kCuda;
      ref.device = 0;
    }
    return r;
  }
};

TEST(CudaStagingEndpoints, GpuTensorsJournaledAndCaughtUp) {
  std::string why;
  if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  GroupSpec spec;
  spec.subscribers = 2;
  spec.anchor_every = 3;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  PublisherOptions po = one_thread<PublisherOptions>(1);
  po.threads = 2;
  auto publisher = Publisher::start(g.config(), po);
  ASSERT_TRUE(publisher.ok()) << publisher.status().to_string();
  DeviceWeights trainer, live_engine, late_engine;
  for (const auto& r : trainer.refs()) ASSERT_TRUE((*publisher)->register_tensor(r).ok());
  auto live = Subscriber::create(g.config(), one_thread<SubscriberOptions>(2));
  ASSERT_TRUE(live.ok());
  for (const auto& r : live_engine.refs()) ASSERT_TRUE((*live)->register_tensor(r).ok());
  ASSERT_TRUE((*live)->connect().ok());

  constexpr uint64_t kVersions = 5;
  for (uint64_t v = 0; v < kVersions; ++v) {
    Weights w;
    w.set(v);
    trainer.upload(w);
    auto h = (*publisher)->publish(v);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    const Status reads = h->wait_for_reads(in(seconds(20)));
    ASSERT_TRUE(reads.ok()) << reads.to_string();
    ASSERT_EQ(cudaMemset(trainer.vec, 0, 1000 * 2), cudaSuccess);  // the next step's writes
    ASSERT_TRUE(h->wait_committed(in(seconds(30))).ok()) << "v" << v;
    ASSERT_TRUE((*live)->wait_for_version(v, in(seconds(30))).ok());
    const Weights got = live_engine.download();
    EXPECT_EQ(got.packed, w.packed) << "v" << v;
    EXPECT_EQ(got.vec, w.vec) << "v" << v;
  }
  // A late subscriber catches up from the journal's anchor and deltas into device memory.
  auto late = Subscriber::create(g.config(), one_thread<SubscriberOptions>(3));
  ASSERT_TRUE(late.ok());
  for (const auto& r : late_engine.refs()) ASSERT_TRUE((*late)->register_tensor(r).ok());
  ASSERT_TRUE((*late)->connect().ok());
  ASSERT_TRUE((*late)->wait_for_version(kVersions - 1, in(seconds(30))).ok());
  Weights expect;
  expect.set(kVersions - 1);
  const Weights got = late_engine.download();
  EXPECT_EQ(got.packed, expect.packed);
  EXPECT_EQ(got.vec, expect.vec);
}

#else

TEST(CudaStagingEndpoints, CudaTensorsRefusedWithoutTheToolkit) {
  GroupSpec spec;
  spec.subscribers = 1;
  TestGroup g(spec);
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  std::vector<uint16_t> host(64, 1);
  const Status s = t.publisher->register_tensor(on_missing_device("gpu.w", host));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("built without the CUDA toolkit"), std::string::npos) << s.message();
}

#endif

}  // namespace
}  // namespace weightcast::testing
