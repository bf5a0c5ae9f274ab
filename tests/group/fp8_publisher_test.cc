// An FP8 group's publisher (src/endpoint/publisher_fp8.cc) in one process against a coordinator
// thread: sources that are strided halves of a packed parameter, quantised in several bands,
// the engine's bytes equal to the codec's quantisation of the trainer's at every version, a
// restarted publisher that continues with a delta, registrations it refuses by name, and a
// source in CUDA memory: quantised on its GPU (tests/gpu/run.sh), or, on a device that does not
// exist, a failed version naming the tensor.
// (The Python test tests/python/test_fp8.py checks the same against the NumPy + ml_dtypes
// reference, and the anchor with the safetensors package.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "codec/cuda_codec.h"
#include "codec/float_convert.h"
#include "codec/fp8_quantize.h"
#include "tests/group/fp8_side.h"
#include "tests/group/trainer_side.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

TEST(Fp8Publisher, StridedSourcesInBandsAndARestartContinuesWithADelta) {
  GroupSpec spec = fp8_group();
  spec.anchor_every = 10;
  TestGroup g(spec);
  ASSERT_TRUE(g.config().fp8().enabled());
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  PackedTrainer trainer;
  Fp8Engine engine;
  PublisherOptions po = one_thread<PublisherOptions>(1);
  po.threads = 2;
  po.staged_piece_bytes = 128 * kCols;  // one block row per band: three bands per half
  auto subscriber = Subscriber::create(g.config(), one_thread<SubscriberOptions>(2));
  ASSERT_TRUE(subscriber.ok()) << subscriber.status().to_string();
  for (const auto& r : engine.refs()) {
    ASSERT_TRUE((*subscriber)->register_tensor(r).ok()) << r.name;
  }
  ASSERT_TRUE((*subscriber)->connect().ok());
  uint64_t v = 0;
  for (int run = 0; run < 2; ++run) {
    auto publisher = Publisher::start(g.config(), po);
    ASSERT_TRUE(publisher.ok()) << publisher.status().to_string();
    for (const auto& r : trainer.refs())
      ASSERT_TRUE((*publisher)->register_tensor(r).ok()) << r.name;
    for (int k = 0; k < 3; ++k, ++v) {
      if (v > 0) trainer.step();
      auto h = (*publisher)->publish(v);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      auto report = h->wait_published(in(seconds(30)));
      ASSERT_TRUE(report.ok()) << report.status().to_string();
      // Only the first version is an anchor: the restarted publisher rebuilt its snapshot of
      // the quantised values from the journal and continues with a delta.
      EXPECT_EQ(report->anchor, v == 0) << "v" << v << ": " << report->why_anchor;
      if (v > 0) {
        EXPECT_GE(report->changed_tensors, 3u) << "v" << v;
      }
      ASSERT_TRUE(h->wait_committed(in(seconds(30))).ok()) << "v" << v;
      ASSERT_TRUE((*subscriber)->wait_for_version(v, in(seconds(30))).ok()) << "v" << v;
      expect_engine_holds(trainer, engine, v);
    }
    (*publisher)->stop();
  }
}

TEST(Fp8Publisher, RefusesSelectedTensorsItCannotQuantiseByName) {
  TestGroup g(fp8_group());
  auto publisher = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(publisher.ok()) << publisher.status().to_string();
  std::vector<uint16_t> bytes(2 * 4 * 4);
  TensorRef cube{"experts.gate_proj.weight", DType::kBF16, {2, 4, 4}, {}, 0, bytes.data()};
  Status s = (*publisher)->register_tensor(cube);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'experts.gate_proj.weight'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("3-D"), std::string::npos) << s.message();
  TensorRef ints{"a_proj.weight", DType::kI32, {4, 2}, {}, 0, bytes.data()};
  EXPECT_NE((*publisher)->register_tensor(ints).message().find("'a_proj.weight' (i32"),
            std::string::npos);
  TensorRef m{"b_proj.weight", DType::kBF16, {4, 4}, {}, 0, bytes.data()};
  // A tensor already registered under the name the FP8 scales of another would take.
  TensorRef taken{"c_proj.weight_scale_inv", DType::kF32, {1, 1}, {}, 0, bytes.data()};
  ASSERT_TRUE((*publisher)->register_tensor(taken).ok());
  TensorRef c{"c_proj.weight", DType::kBF16, {4, 4}, {}, 0, bytes.data()};
  s = (*publisher)->register_tensor(c);
  EXPECT_NE(s.message().find("scale name 'c_proj.weight_scale_inv'"), std::string::npos)
      << s.message();
  // The FP8 pair of a registered tensor takes both names.
  ASSERT_TRUE((*publisher)->register_tensor(m).ok());
  TensorRef again{"b_proj.weight_scale_inv", DType::kF32, {1, 1}, {}, 0, bytes.data()};
  s = (*publisher)->register_tensor(again);
  EXPECT_NE(s.message().find("FP8 tensor's scales"), std::string::npos) << s.message();
  (*publisher)->stop();
}

#if WEIGHTCAST_HAVE_CUDA

TEST(Fp8Publisher, ACudaSourceThatCannotBeReadFailsTheVersionNamingIt) {
  TestGroup g(fp8_group());
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  auto publisher = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(publisher.ok()) << publisher.status().to_string();
  std::vector<uint16_t> host(128 * 128, 1);
  TensorRef ref{"gpu.q_proj.weight", DType::kBF16, {128, 128}, {}, 0, host.data()};
  ref.memory = MemoryKind::kCuda;
  ref.device = 99;  // no usable device has that ordinal
  ASSERT_TRUE((*publisher)->register_tensor(ref).ok());
  auto h = (*publisher)->publish(0);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  const auto published = h->wait_published(in(seconds(20)));
  ASSERT_FALSE(published.ok());
  EXPECT_NE(published.status().message().find("'gpu.q_proj.weight'"), std::string::npos)
      << published.status().message();
  EXPECT_EQ((*publisher)->head(), std::nullopt);  // nothing journaled
  (*publisher)->stop();
}

TEST(Fp8Publisher, ACudaSourceIsQuantisedOnItsGpuAsTheCpuWould) {
  std::string why;
  if (!cuda_codec::device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  TestGroup g(fp8_group());
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  PackedTrainer trainer;
  void* device = nullptr;
  const size_t bytes = trainer.gate_up.size() * 2;
  ASSERT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
  Fp8Engine engine;
  auto subscriber = Subscriber::create(g.config(), one_thread<SubscriberOptions>(2));
  ASSERT_TRUE(subscriber.ok());
  for (const auto& r : engine.refs()) ASSERT_TRUE((*subscriber)->register_tensor(r).ok());
  ASSERT_TRUE((*subscriber)->connect().ok());
  PublisherOptions po = one_thread<PublisherOptions>(1);
  po.staged_piece_bytes = 128 * kCols;  // three bands per half
  auto publisher = Publisher::start(g.config(), po);
  ASSERT_TRUE(publisher.ok()) << publisher.status().to_string();
  for (auto r : trainer.refs()) {
    if (r.name != "norm.weight") {  // the packed halves live on the GPU
      r.data = device;
      r.memory = MemoryKind::kCuda;
      r.device = 0;
    }
    ASSERT_TRUE((*publisher)->register_tensor(r).ok()) << r.name;
  }
  for (uint64_t v = 0; v < 3; ++v) {
    if (v > 0) trainer.step();
    ASSERT_EQ(cudaMemcpy(device, trainer.gate_up.data(), bytes, cudaMemcpyHostToDevice),
              cudaSuccess);
    auto h = (*publisher)->publish(v);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    ASSERT_TRUE(h->wait_committed(in(seconds(30))).ok()) << "v" << v;
    ASSERT_TRUE((*subscriber)->wait_for_version(v, in(seconds(30))).ok()) << "v" << v;
    expect_engine_holds(trainer, engine, v);  // the CPU's quantisation of the host copy
  }
  (*publisher)->stop();
  cudaFree(device);
}

#endif  // WEIGHTCAST_HAVE_CUDA

}  // namespace
}  // namespace weightcast::testing
