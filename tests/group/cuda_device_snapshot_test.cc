// The trainer's side with CUDA tensors, on a GPU (tests/gpu/run.sh): snapshot mode with
// `publisher.snapshot: device` (contiguous CUDA tensors diffed on their GPU against a device
// snapshot) publishes the same delta parts as with the host snapshot, and the engine verifies
// every version; hooked writes of device memory into a CUDA tensor reach the engine verified.
// Without a usable GPU every case skips, saying why.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "src/endpoint/publisher.h"
#include "tests/group/trainer_side.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>

#include "transport/copy_executor_cuda.h"
#endif

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

#if WEIGHTCAST_HAVE_CUDA

// `vec` of a Weights in device memory (contiguous: the device snapshot's case).
struct DeviceVec {
  uint16_t* data = nullptr;
  DeviceVec() { EXPECT_EQ(cudaMalloc(&data, 1000 * 2), cudaSuccess); }
  ~DeviceVec() { cudaFree(data); }
  void upload(const std::vector<uint16_t>& v) {
    EXPECT_EQ(cudaMemcpy(data, v.data(), 1000 * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<uint16_t> download() const {
    std::vector<uint16_t> v(1000);
    EXPECT_EQ(cudaMemcpy(v.data(), data, 1000 * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  TensorRef ref(const std::string& name = "vec") const {
    TensorRef r = TensorRef::contiguous(name, DType::kBF16, data, 1000);
    r.memory = MemoryKind::kCuda;
    r.device = 0;
    return r;
  }
};

std::string part_bytes(const std::string& journal, uint64_t v) {
  const JournalLayout layout(journal);
  auto m = read_manifest_file(layout.manifest(v));
  if (!m.ok() || m->kind() != proto::STEP_DELTA) return "not a delta";
  std::string bytes;
  for (const auto& part : m->parts()) {
    std::ifstream in(layout.step(v) + "/" + part.file(), std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}

// Publishes versions 0..4 of a trainer whose packed halves are on the host and whose vec is
// on the GPU, with the snapshot where `where` says; the engine (host) verifies each.
void publish_with_snapshot(const TestGroup& g, const std::string& where) {
  proto::GroupConfig config = g.config();
  config.mutable_publisher()->set_snapshot(where);
  CoordinatorThread coordinator(config, g.listen_fd());
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  auto p = Publisher::start(config, one_thread<PublisherOptions>(1));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Weights trainer;
  DeviceVec vec;
  auto refs = trainer.refs();
  refs[2] = vec.ref();
  for (const auto& r : refs) ASSERT_TRUE((*p)->register_tensor(r).ok()) << r.name;
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, one_thread<SubscriberOptions>(2), engine, bad);
  ASSERT_NE(sub, nullptr);
  for (uint64_t v = 0; v < 5; ++v) {
    trainer.set(v);
    vec.upload(trainer.vec);
    auto h = (*p)->publish(v);
    ASSERT_TRUE(h.ok());
    Status committed = h->wait_committed(in(seconds(30)));
    ASSERT_TRUE(committed.ok()) << where << " v" << v << ": " << committed.to_string();
  }
  EXPECT_TRUE(engine_at(*sub, engine, 4));
  EXPECT_TRUE(bad.empty()) << where << ": " << bad.front();
}

TEST(CudaDeviceSnapshot, DeviceSnapshotPublishesTheHostSnapshotsParts) {
  std::string why;
  if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 100;
  TestGroup on_device(spec), on_host(spec);
  publish_with_snapshot(on_device, "device");
  publish_with_snapshot(on_host, "host");
  for (uint64_t v = 1; v < 5; ++v) {
    const std::string device = part_bytes(on_device.journal(), v);
    EXPECT_NE(device, "not a delta") << "v" << v;
    EXPECT_EQ(device, part_bytes(on_host.journal(), v)) << "v" << v;
  }
}

TEST(CudaDeviceSnapshot, HookedWritesFromDeviceMemoryReachTheEngine) {
  std::string why;
  if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 3;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok());
  auto p = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Weights trainer;
  trainer.set(0);
  DeviceVec live, next;
  live.upload(trainer.vec);
  auto refs = trainer.refs();
  refs[2] = live.ref();
  for (const auto& r : refs) ASSERT_TRUE((*p)->register_tensor(r, TensorUpdates::kHooked).ok());
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, one_thread<SubscriberOptions>(2), engine, bad);
  ASSERT_NE(sub, nullptr);
  for (uint64_t v = 1; v <= 4; ++v) {
    Weights w;
    w.set(v);
    next.upload(w.vec);
    auto step = (*p)->begin_step(v);
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    ASSERT_TRUE((*step)->write(live.ref("vec live"), next.ref("vec new")).ok());
    for (size_t half = 0; half < 2; ++half) {
      std::vector<uint16_t> values;
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t c = 0; c < 32; ++c) values.push_back(w.packed[r * 64 + 32 * half + c]);
      }
      ASSERT_TRUE(
          (*step)
              ->write(refs[half], TensorRef::contiguous("new", DType::kBF16, values.data(), 128))
              .ok());
    }
    auto h = (*p)->publish_step(*step);
    ASSERT_TRUE(h.ok());
    Status committed = h->wait_committed(in(seconds(30)));
    ASSERT_TRUE(committed.ok()) << "v" << v << ": " << committed.to_string();
    EXPECT_EQ(live.download(), w.vec) << "v" << v;
  }
  EXPECT_TRUE(engine_at(*sub, engine, 4));
  EXPECT_TRUE(bad.empty()) << bad.front();
}

#else

TEST(CudaDeviceSnapshot, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA toolkit: device snapshots and CUDA hooked writes "
                  "are not compiled";
}

#endif

}  // namespace
}  // namespace weightcast::testing
