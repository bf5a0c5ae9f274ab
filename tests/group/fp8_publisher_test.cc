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
#include "tests/group/trainer_side.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

float bf16_value(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

constexpr int64_t kRows = 300, kCols = 200;  // per half: a 3 x 2 grid, ragged at both edges
constexpr char kFp8[] = "fp8: {quantize: ['.*_proj\\.weight$']}\n";

// The trainer: gate_up [300, 400] bf16, published as its two column halves, and a norm.
struct PackedTrainer {
  std::vector<uint16_t> gate_up = std::vector<uint16_t>(kRows * 2 * kCols);
  std::vector<uint16_t> norm = std::vector<uint16_t>(kCols);
  std::mt19937_64 rng{17};
  PackedTrainer() {
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (auto& x : gate_up) x = float_to_bf16(d(rng));
    for (auto& x : norm) x = float_to_bf16(1.0f + d(rng));
  }
  void step() {  // about 1 % of the elements move, as an optimizer step's would
    std::uniform_int_distribution<size_t> at(0, gate_up.size() - 1);
    for (size_t k = 0; k < gate_up.size() / 100; ++k) {
      auto& x = gate_up[at(rng)];
      x = float_to_bf16(bf16_value(x) * 1.01f + 1e-4f);
    }
    norm[k_step++ % kCols] ^= 1;
  }
  TensorRef half(const char* name, int64_t offset) {
    return TensorRef{name, DType::kBF16, {kRows, kCols}, {2 * kCols, 1}, offset, gate_up.data()};
  }
  std::vector<TensorRef> refs() {
    return {half("mlp.gate_proj.weight", 0), half("mlp.up_proj.weight", kCols),
            TensorRef::contiguous("norm.weight", DType::kBF16, norm.data(), kCols)};
  }
  size_t k_step = 0;
};

// One subscriber, the fp8 section.
GroupSpec fp8_group() {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.extra_yaml = kFp8;
  return spec;
}

// The engine: FP8 values and scales of both halves, the norm in bf16.
struct Fp8Engine {
  std::vector<uint8_t> gate = std::vector<uint8_t>(kRows * kCols), up = gate;
  std::vector<float> gate_scale = std::vector<float>(3 * 2), up_scale = gate_scale;
  std::vector<uint16_t> norm = std::vector<uint16_t>(kCols);
  std::vector<TensorRef> refs() {
    auto values = [](const char* name, std::vector<uint8_t>& v) {
      TensorRef r = TensorRef::contiguous(name, DType::kF8E4M3FN, v.data(), kRows * kCols);
      r.shape = {kRows, kCols};
      return r;
    };
    auto scales = [](const char* name, std::vector<float>& v) {
      TensorRef r = TensorRef::contiguous(name, DType::kF32, v.data(), 6);
      r.shape = {3, 2};
      return r;
    };
    return {values("mlp.gate_proj.weight", gate),
            scales("mlp.gate_proj.weight_scale_inv", gate_scale), values("mlp.up_proj.weight", up),
            scales("mlp.up_proj.weight_scale_inv", up_scale),
            TensorRef::contiguous("norm.weight", DType::kBF16, norm.data(), kCols)};
  }
};

// Compares the engine with the codec's quantisation of the trainer's halves (the codec's
// quantiser is checked bit for bit against NumPy + ml_dtypes in tests/codec).
void expect_engine_holds(PackedTrainer& t, const Fp8Engine& e, uint64_t v) {
  auto refs = t.refs();
  for (int h = 0; h < 2; ++h) {
    std::vector<uint8_t> q(kRows * kCols);
    std::vector<float> s(6);
    ASSERT_TRUE(quantize_fp8_blocks(refs[h], q, s).ok());
    EXPECT_EQ(q, h == 0 ? e.gate : e.up) << refs[h].name << " at v" << v;
    EXPECT_EQ(s, h == 0 ? e.gate_scale : e.up_scale) << refs[h].name << " at v" << v;
  }
  EXPECT_EQ(t.norm, e.norm) << "v" << v;
}

TEST(Fp8Publisher, StridedSourcesInBandsAndARestartContinuesWithADelta) {
  GroupSpec spec = fp8_group();
  spec.anchor_every = 10;
  TestGroup g(spec);
  ASSERT_TRUE(g.config().fp8().enabled());
  CoordinatorThread coordinator(g.config());
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
  s = (*publisher)->register_tensor(m, TensorUpdates::kHooked);
  EXPECT_NE(s.message().find("snapshot path"), std::string::npos) << s.message();
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
  CoordinatorThread coordinator(g.config());
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
  CoordinatorThread coordinator(g.config());
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
