// Hooked writes in an FP8 group (src/endpoint/publish_step_fp8.cc), a publisher in this
// process against a coordinator thread and one engine holding FP8 values and scales: the
// trainer writes its packed gate_up halves through the step, one half in one write (whole
// 128-row bands) and the other in runs of 50 rows (bands completed across writes); the engine
// holds the codec's quantisation of the trainer at every version, anchors streamed during the
// step included; the delta records are byte for byte snapshot mode's; the guard refuses a
// change outside the step that moves the quantisation and a band never completed, naming the
// tensor and publishing nothing; a band written twice is refused at the write; a CUDA source
// (tests/gpu/run.sh).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "codec/cuda_codec.h"
#include "tests/group/fp8_side.h"
#include "tests/group/trainer_side.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

struct Faults {
  bool skip_up_head = false;   // rows [0, 50) of the up half never written
  bool up_head_twice = false;  // rows [0, 50) of the up half written twice
};

// Rows [row, row + count) of half `column` (0: gate, kCols: up) of `t.gate_up`, contiguous.
std::vector<uint16_t> half_rows(const PackedTrainer& t, int64_t column, int64_t row,
                                int64_t count) {
  std::vector<uint16_t> out;
  for (int64_t r = row; r < row + count; ++r) {
    const auto* p = t.gate_up.data() + r * 2 * kCols + column;
    out.insert(out.end(), p, p + kCols);
  }
  return out;
}

// Writes `next` into `live` through `step`: the gate half in one write, the up half in runs of
// 50 rows, the norm whole.
Status write_version(PublishStep& step, PackedTrainer& live, const PackedTrainer& next,
                     const Faults& f = {}) {
  std::vector<uint16_t> gate = half_rows(next, 0, 0, kRows);
  RETURN_IF_ERROR(step.write(live.half("gate view", 0),
                             TensorRef::contiguous("new gate", DType::kBF16, gate.data(),
                                                   static_cast<int64_t>(gate.size()))));
  for (int64_t row = f.skip_up_head ? 50 : 0; row < kRows; row += 50) {
    const int64_t n = std::min<int64_t>(50, kRows - row);
    std::vector<uint16_t> values = half_rows(next, kCols, row, n);
    const TensorRef view{
        "up rows",          DType::kBF16, {n, kCols}, {2 * kCols, 1}, row * 2 * kCols + kCols,
        live.gate_up.data()};
    const TensorRef fresh = TensorRef::contiguous("new up", DType::kBF16, values.data(), n * kCols);
    RETURN_IF_ERROR(step.write(view, fresh));
    if (f.up_head_twice && row == 0) RETURN_IF_ERROR(step.write(view, fresh));
  }
  std::vector<uint16_t> norm = next.norm;
  return step.write(TensorRef::contiguous("norm view", DType::kBF16, live.norm.data(), kCols),
                    TensorRef::contiguous("new norm", DType::kBF16, norm.data(), kCols));
}

// A coordinator thread, one engine and a publisher of the trainer's tensors (hooked or not).
struct Fp8Group {
  explicit Fp8Group(TensorUpdates updates) : group(spec()), coordinator(group) {
    if (Status s = start(updates); !s.ok()) error = s.to_string();
  }
  Status start(TensorUpdates updates) {
    ASSIGN_OR_RETURN(subscriber,
                     Subscriber::create(group.config(), one_thread<SubscriberOptions>(2)));
    for (const auto& r : engine.refs()) RETURN_IF_ERROR(subscriber->register_tensor(r));
    RETURN_IF_ERROR(subscriber->connect());
    PublisherOptions po = one_thread<PublisherOptions>(1);
    po.threads = 2;
    ASSIGN_OR_RETURN(publisher, Publisher::start(group.config(), po));
    for (const auto& r : trainer.refs()) RETURN_IF_ERROR(publisher->register_tensor(r, updates));
    return ok_status();
  }
  static GroupSpec spec() {
    GroupSpec s = fp8_group();
    s.subscribers = 2;  // the second joins late
    s.anchor_every = 3;
    return s;
  }
  bool ok() const { return coordinator.ok() && publisher && error.empty(); }
  // Version v through a hooked step, committed and applied by the engine.
  Status hooked(uint64_t v, const Faults& f = {}) {
    PackedTrainer next = trainer;
    if (v > 0) next.step();
    ASSIGN_OR_RETURN(auto step, publisher->begin_step(v));
    RETURN_IF_ERROR(write_version(*step, trainer, next, f));
    trainer.rng = next.rng;
    trainer.k_step = next.k_step;
    ASSIGN_OR_RETURN(auto handle, publisher->publish_step(step));
    RETURN_IF_ERROR(handle.wait_committed(in(seconds(30))));
    return subscriber->wait_for_version(v, in(seconds(30)));
  }
  // Version v in snapshot mode.
  Status snapshot(uint64_t v) {
    if (v > 0) trainer.step();
    ASSIGN_OR_RETURN(auto handle, publisher->publish(v));
    RETURN_IF_ERROR(handle.wait_committed(in(seconds(30))));
    return subscriber->wait_for_version(v, in(seconds(30)));
  }

  TestGroup group;
  CoordinatorThread coordinator;
  PackedTrainer trainer;
  Fp8Engine engine;
  std::unique_ptr<Subscriber> subscriber;
  std::unique_ptr<Publisher> publisher;
  std::string error;
};

TEST(Fp8Hooked, WritesInWholeAndPartBandsReachTheEngineAsSnapshotModeWould) {
  Fp8Group hooked(TensorUpdates::kHooked), snapshot(TensorUpdates::kSnapshot);
  ASSERT_TRUE(hooked.ok()) << hooked.error;
  ASSERT_TRUE(snapshot.ok()) << snapshot.error;
  for (uint64_t v = 0; v <= 4; ++v) {
    ASSERT_TRUE(hooked.hooked(v).ok()) << "v" << v;
    ASSERT_TRUE(snapshot.snapshot(v).ok()) << "v" << v;
    EXPECT_EQ(hooked.trainer.gate_up, snapshot.trainer.gate_up) << "v" << v;
    expect_engine_holds(hooked.trainer, hooked.engine, v);
    expect_engine_holds(snapshot.trainer, snapshot.engine, v);
  }
  // Versions 0 and 3 are anchors (anchor_every 3; hooked: written during the step); the
  // others are deltas, the same bytes in both modes, and not empty.
  for (const uint64_t v : {1, 2, 4}) {
    const std::string parts = delta_parts(hooked.group.journal(), v);
    EXPECT_EQ(parts.rfind("not a delta", 0), std::string::npos) << "v" << v << ": " << parts;
    EXPECT_FALSE(parts.empty()) << "v" << v;
    EXPECT_EQ(parts, delta_parts(snapshot.group.journal(), v)) << "v" << v;
  }
  auto anchor = read_manifest_file(JournalLayout(hooked.group.journal()).manifest(3));
  ASSERT_TRUE(anchor.ok()) << anchor.status().to_string();
  EXPECT_EQ(anchor->kind(), proto::STEP_ANCHOR);
  // A late engine joins from the streamed anchor and the delta after it, verified.
  Fp8Engine late;
  auto s = Subscriber::create(hooked.group.config(), one_thread<SubscriberOptions>(3));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  for (const auto& r : late.refs()) ASSERT_TRUE((*s)->register_tensor(r).ok()) << r.name;
  ASSERT_TRUE((*s)->connect().ok()) << "late engine";
  ASSERT_TRUE((*s)->wait_for_version(4, in(seconds(30))).ok());
  expect_engine_holds(hooked.trainer, late, 4);
}

TEST(Fp8Hooked, TheGuardRefusesWhatMovesTheQuantisationOutsideTheStepAndUnfinishedBands) {
  Fp8Group g(TensorUpdates::kHooked);
  ASSERT_TRUE(g.ok()) << g.error;
  ASSERT_TRUE(g.hooked(0).ok());
  ASSERT_TRUE(g.hooked(1).ok());
  // Written through the step, then changed around it: a new block maximum moves every
  // quantised value of that block and its scale.
  {
    PackedTrainer next = g.trainer;
    next.step();
    auto step = g.publisher->begin_step(2);
    ASSERT_TRUE(step.ok());
    ASSERT_TRUE(write_version(**step, g.trainer, next).ok());
    g.trainer.gate_up[5] = float_to_bf16(3.0f);
    auto handle = g.publisher->publish_step(*step);
    ASSERT_TRUE(handle.ok());
    Status refused = handle->wait_committed(in(seconds(30)));
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("FP8 tensor 'mlp.gate_proj.weight' changed outside the step"),
              std::string::npos)
        << refused.message();
    EXPECT_EQ(g.publisher->head(), std::optional<uint64_t>(1));  // nothing published
    g.trainer.rng = next.rng;
    g.trainer.k_step = next.k_step;
  }
  // The next step publishes (an anchor: it no longer follows the journal's head).
  ASSERT_TRUE(g.hooked(3).ok());
  expect_engine_holds(g.trainer, g.engine, 3);
  // A band never completed: refused at publish, naming the tensor.
  Status unfinished = g.hooked(4, Faults{true, false});
  ASSERT_FALSE(unfinished.ok());
  EXPECT_NE(unfinished.message().find("'mlp.up_proj.weight'"), std::string::npos)
      << unfinished.message();
  EXPECT_EQ(g.publisher->head(), std::optional<uint64_t>(3));
  // Rows of a band written twice: refused at the write.
  Status twice = g.hooked(5, Faults{false, true});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("written twice"), std::string::npos) << twice.message();
  EXPECT_NE(twice.message().find("'mlp.up_proj.weight'"), std::string::npos) << twice.message();
  // And the group goes on.
  ASSERT_TRUE(g.hooked(6).ok());
  expect_engine_holds(g.trainer, g.engine, 6);
}

#if WEIGHTCAST_HAVE_CUDA

// A contiguous CUDA source (tests/gpu/run.sh): whole-band writes from device memory (both
// sides quantised on the GPU) and writes of 50 rows from host memory (a part band's old bytes
// saved to the host), the engine holding the CPU's quantisation of the trainer every version.
TEST(Fp8Hooked, ACudaSourceWrittenFromDeviceAndHostMemory) {
  if (std::string why; !cuda_codec::device_usable(&why)) {
    GTEST_SKIP() << "no usable CUDA device: " << why;
  }
  GroupSpec spec = fp8_group();
  spec.anchor_every = 3;
  TestGroup g(spec);
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  Fp8Engine engine;
  auto sub = Subscriber::create(g.config(), one_thread<SubscriberOptions>(2));
  ASSERT_TRUE(sub.ok()) << sub.status().to_string();
  const auto refs = engine.refs();
  for (size_t k = 0; k < 2; ++k) ASSERT_TRUE((*sub)->register_tensor(refs[k]).ok()) << refs[k].name;
  ASSERT_TRUE((*sub)->connect().ok());
  auto publisher = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(publisher.ok()) << publisher.status().to_string();
  PackedTrainer host;  // its first kRows * kCols values are the matrix
  std::vector<uint16_t> matrix(host.gate_up.begin(), host.gate_up.begin() + kRows * kCols);
  const size_t bytes = matrix.size() * 2;
  void *live = nullptr, *fresh = nullptr;
  ASSERT_EQ(cudaMalloc(&live, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&fresh, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(live, matrix.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  const auto on_gpu = [](const char* name, void* data, int64_t offset, int64_t rows) {
    TensorRef r{name, DType::kBF16, {rows, kCols}, {}, offset, data};
    r.memory = MemoryKind::kCuda;
    r.device = 0;
    return r;
  };
  ASSERT_TRUE(
      (*publisher)
          ->register_tensor(on_gpu("mlp.gate_proj.weight", live, 0, kRows), TensorUpdates::kHooked)
          .ok());
  std::mt19937_64 rng(3);
  for (uint64_t v = 0; v <= 4; ++v) {
    std::vector<uint16_t> next = matrix;
    for (size_t k = 0; v > 0 && k < next.size() / 50; ++k) {
      auto& x = next[rng() % next.size()];
      x = float_to_bf16(bf16_value(x) * 1.05f + 1e-3f);
    }
    auto step = (*publisher)->begin_step(v);
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    if (v % 2 == 0) {
      ASSERT_EQ(cudaMemcpy(fresh, next.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      Status w = (*step)->write(on_gpu("live", live, 0, kRows), on_gpu("new", fresh, 0, kRows));
      ASSERT_TRUE(w.ok()) << w.to_string();
    } else {
      for (int64_t row = 0; row < kRows; row += 50) {
        const int64_t n = std::min<int64_t>(50, kRows - row);
        Status w = (*step)->write(
            on_gpu("live rows", live, row * kCols, n),
            TensorRef::contiguous("new", DType::kBF16, next.data() + row * kCols, n * kCols));
        ASSERT_TRUE(w.ok()) << w.to_string();
      }
    }
    auto h = (*publisher)->publish_step(*step);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    Status committed = h->wait_committed(in(seconds(30)));
    ASSERT_TRUE(committed.ok()) << "v" << v << ": " << committed.to_string();
    ASSERT_TRUE((*sub)->wait_for_version(v, in(seconds(30))).ok()) << "v" << v;
    std::vector<uint16_t> now(matrix.size());
    ASSERT_EQ(cudaMemcpy(now.data(), live, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(now, next) << "v" << v;
    matrix = next;
    TensorRef cpu = TensorRef::contiguous("cpu", DType::kBF16, matrix.data(), kRows * kCols);
    cpu.shape = {kRows, kCols};
    std::vector<uint8_t> q(matrix.size());
    std::vector<float> s(6);
    ASSERT_TRUE(quantize_fp8_blocks(cpu, q, s).ok());
    EXPECT_EQ(q, engine.gate) << "v" << v;
    EXPECT_EQ(s, engine.gate_scale) << "v" << v;
  }
  (*publisher)->stop();
  cudaFree(live);
  cudaFree(fresh);
}

#endif  // WEIGHTCAST_HAVE_CUDA

}  // namespace
}  // namespace weightcast::testing
