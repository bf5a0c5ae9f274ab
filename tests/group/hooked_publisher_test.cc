// Hooked mode (src/endpoint/publish_step.h), a publisher in this process against a coordinator
// thread and an in-place engine: versions written through the hook (strided row views of a
// packed parameter, a vector in pieces) reach the engine verified; the records are byte for
// byte snapshot mode's; the guard refuses a weight changed outside the step, a tensor never
// written and a write that went around the hook, naming the tensor and publishing nothing,
// and the next step publishes; the next step may write once a version's reads are done;
// hooked and snapshot tensors mix in one version.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "tests/group/trainer_side.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {
namespace {

using namespace weightcast::testing;
using std::chrono::seconds;

// What to leave out of a step's writes, and what to do around them.
struct StepFaults {
  std::set<std::string> skip;     // tensors not written
  bool bypass_vec_piece = false;  // vec[0, 300) written directly before going through the hook
};

// Writes version v of `live` through `step`: the packed halves two rows at a time (strided
// [2, 32] views), `vec` in pieces of 300 elements. Returns the first write error.
Status write_version(PublishStep& step, Weights& live, uint64_t v, const StepFaults& faults = {}) {
  Weights next;
  next.set(v);
  if (faults.bypass_vec_piece) std::memcpy(live.vec.data(), next.vec.data(), 300 * 2);
  for (const auto& [name, column] : {std::pair<std::string, int64_t>{"packed.left", 0},
                                     std::pair<std::string, int64_t>{"packed.right", 32}}) {
    if (faults.skip.count(name) != 0) continue;
    for (int64_t row = 0; row < 4; row += 2) {
      TensorRef view{name + " rows", DType::kBF16,      {2, 32},
                     {64, 1},        row * 64 + column, live.packed.data()};
      std::vector<uint16_t> values;
      for (int64_t r = row; r < row + 2; ++r) {
        for (int64_t c = 0; c < 32; ++c) values.push_back(next.packed[r * 64 + column + c]);
      }
      RETURN_IF_ERROR(
          step.write(view, TensorRef::contiguous("new", DType::kBF16, values.data(), 64)));
    }
  }
  if (faults.skip.count("vec") == 0) {
    for (int64_t at = 0; at < 1000; at += 300) {
      const int64_t n = std::min<int64_t>(300, 1000 - at);
      RETURN_IF_ERROR(
          step.write(TensorRef::contiguous("vec piece", DType::kBF16, live.vec.data() + at, n),
                     TensorRef::contiguous("new", DType::kBF16, next.vec.data() + at, n)));
    }
  }
  return ok_status();
}

// A coordinator thread and a publisher whose tensors are registered as `hooked` says.
struct HookedTrainer {
  HookedTrainer(const TestGroup& g, std::set<std::string> hooked) : coordinator(g) {
    auto p = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
    if (!p.ok()) {
      error = p.status().to_string();
      return;
    }
    publisher = std::move(p).value();
    trainer.set(0);
    for (const auto& r : trainer.refs()) {
      Status s = publisher->register_tensor(
          r, hooked.count(r.name) ? TensorUpdates::kHooked : TensorUpdates::kSnapshot);
      if (!s.ok()) error = s.to_string();
    }
  }
  bool ok() const { return coordinator.ok() && publisher && error.empty(); }
  // Version v through a step (writing the hooked tensors, setting the others), committed.
  Status step(uint64_t v, const StepFaults& faults = {}) {
    ASSIGN_OR_RETURN(auto s, publisher->begin_step(v));
    RETURN_IF_ERROR(write_version(*s, trainer, v, faults));
    if (snapshot_vec) {
      Weights next;
      next.set(v);
      trainer.vec = next.vec;  // the snapshot tensor, written as the trainer always does
    }
    ASSIGN_OR_RETURN(auto handle, publisher->publish_step(s));
    return handle.wait_committed(in(seconds(30)));
  }

  CoordinatorThread coordinator;
  Weights trainer;
  bool snapshot_vec = false;
  std::unique_ptr<Publisher> publisher;
  std::string error;
};

GroupSpec one_engine() {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 100;
  return spec;
}

TEST(HookedPublisher, StepsReachTheEngineVerifiedAndTheirRecordsAreSnapshotModes) {
  TestGroup hooked_group(one_engine());
  TestGroup snapshot_group(one_engine());
  {
    HookedTrainer t(hooked_group, {"packed.left", "packed.right", "vec"});
    ASSERT_TRUE(t.ok()) << t.error << t.coordinator.error();
    Weights engine;
    std::vector<std::string> bad;
    auto sub = connect_engine(hooked_group, one_thread<SubscriberOptions>(2), engine, bad);
    ASSERT_NE(sub, nullptr);
    for (uint64_t v = 1; v <= 4; ++v) ASSERT_TRUE(t.step(v).ok()) << "version " << v;
    EXPECT_TRUE(engine_at(*sub, engine, 4));
    EXPECT_TRUE(bad.empty()) << bad.front();
    // Snapshot mode of the hooked tensors costs nothing here: it holds no copy of them.
    EXPECT_FALSE(t.publisher->publish(5).ok());
  }
  {
    TrainerSide t(snapshot_group);
    ASSERT_TRUE(t.ok()) << t.why();
    ASSERT_TRUE(t.publish_committed(1, 5));
  }
  for (uint64_t v = 2; v <= 4; ++v) {
    const std::string hooked = delta_parts(hooked_group.journal(), v);
    EXPECT_FALSE(hooked.starts_with("not a delta")) << hooked;
    EXPECT_EQ(hooked, delta_parts(snapshot_group.journal(), v)) << "version " << v;
  }
}

// wait_for_reads is the trainer's go-ahead: the guard read the live tensors before it returns
// (it runs beside the journal write), so the next step's writes may start at once, while the
// version is still being committed, without the guard seeing them. The tensor is large enough
// (96 MiB) that its guard outlasts the writing of a sparse record by far.
TEST(HookedPublisher, TheNextStepMayWriteOnceTheReadsAreDone) {
  TestGroup g(one_engine());
  CoordinatorThread coordinator(g);
  ASSERT_TRUE(coordinator.ok()) << coordinator.error();
  auto started = Publisher::start(g.config(), one_thread<PublisherOptions>(1));
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  std::unique_ptr<Publisher> publisher = std::move(started).value();
  constexpr int64_t kElements = int64_t{48} << 20, kPiece = int64_t{4} << 20;
  std::vector<uint16_t> live(kElements), next(kElements);
  for (int64_t i = 0; i < kElements; ++i) live[i] = static_cast<uint16_t>(i * 31);
  ASSERT_TRUE(
      publisher
          ->register_tensor(TensorRef::contiguous("w", DType::kBF16, live.data(), kElements),
                            TensorUpdates::kHooked)
          .ok());
  std::vector<PublishHandle> handles;
  for (uint64_t v = 1; v <= 6; ++v) {
    next = live;
    for (int64_t i = static_cast<int64_t>(v); i < kElements; i += 997) next[i] ^= 1;
    auto step = publisher->begin_step(v);
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    for (int64_t at = 0; at < kElements; at += kPiece) {
      ASSERT_TRUE(
          (*step)
              ->write(TensorRef::contiguous("w piece", DType::kBF16, live.data() + at, kPiece),
                      TensorRef::contiguous("new", DType::kBF16, next.data() + at, kPiece))
              .ok());
    }
    auto handle = publisher->publish_step(*step);
    ASSERT_TRUE(handle.ok());
    ASSERT_TRUE(handle->wait_for_reads(in(seconds(30))).ok()) << "version " << v;
    handles.push_back(std::move(*handle));  // not committed yet, perhaps: the next step writes
  }
  for (size_t k = 0; k < handles.size(); ++k) {
    Status committed = handles[k].wait_committed(in(seconds(30)));
    EXPECT_TRUE(committed.ok()) << "version " << k + 1 << ": " << committed.to_string();
  }
  EXPECT_EQ(publisher->head(), std::optional<uint64_t>(6));
}

struct GuardCase {
  const char* what;
  StepFaults faults;
  bool change_outside = false;  // a weight changed after the step's writes
  const char* named;
  const char* says;
};

class HookedGuard : public ::testing::TestWithParam<GuardCase> {};

TEST_P(HookedGuard, RefusesNamingTheTensorPublishesNothingAndTheNextStepPublishes) {
  const GuardCase& c = GetParam();
  TestGroup g(one_engine());
  HookedTrainer t(g, {"packed.left", "packed.right", "vec"});
  ASSERT_TRUE(t.ok()) << t.error;
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, one_thread<SubscriberOptions>(2), engine, bad);
  ASSERT_NE(sub, nullptr);
  ASSERT_TRUE(t.step(1).ok());
  ASSERT_TRUE(t.step(2).ok());

  auto step = t.publisher->begin_step(3);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  ASSERT_TRUE(write_version(**step, t.trainer, 3, c.faults).ok());
  if (c.change_outside) t.trainer.packed[64 + 40] ^= 0x0100;  // packed.right, row 1
  auto handle = t.publisher->publish_step(*step);
  ASSERT_TRUE(handle.ok());
  auto published = handle->wait_published(in(seconds(30)));
  ASSERT_FALSE(published.ok()) << c.what;
  EXPECT_NE(published.status().message().find(std::string("'") + c.named + "'"), std::string::npos)
      << published.status().to_string();
  EXPECT_NE(published.status().message().find(c.says), std::string::npos)
      << published.status().to_string();
  EXPECT_NE(published.status().message().find("nothing published"), std::string::npos);
  EXPECT_EQ(t.publisher->head(), std::optional<uint64_t>(2));
  EXPECT_FALSE(read_manifest_file(JournalLayout(g.journal()).manifest(3)).ok());

  // The next correct step publishes (an anchor: the journal holds 2, the live weights did not
  // stay there) and the engine verifies it.
  ASSERT_TRUE(t.step(4).ok());
  EXPECT_TRUE(engine_at(*sub, engine, 4));
  auto v4 = read_manifest_file(JournalLayout(g.journal()).manifest(4));
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->kind(), proto::STEP_ANCHOR);
  ASSERT_TRUE(t.step(5).ok());  // and then deltas again
  auto v5 = read_manifest_file(JournalLayout(g.journal()).manifest(5));
  ASSERT_TRUE(v5.ok());
  EXPECT_EQ(v5->kind(), proto::STEP_DELTA);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HookedGuard,
    ::testing::Values(
        GuardCase{"changed outside the step", {}, true, "packed.right", "changed outside the step"},
        GuardCase{
            "never written", {{"packed.right"}, false}, false, "packed.right", "never written"},
        GuardCase{"went around the hook", {{}, true}, false, "vec", "changed outside the step"}),
    [](const ::testing::TestParamInfo<GuardCase>& info) {
      std::string name;
      for (const char* p = info.param.what; *p; ++p) name += std::isalnum(*p) ? *p : '_';
      return name;
    });

TEST(HookedPublisher, HookedAndSnapshotTensorsMixInOneVersion) {
  TestGroup g(one_engine());
  HookedTrainer t(g, {"packed.left", "packed.right"});
  ASSERT_TRUE(t.ok()) << t.error;
  t.snapshot_vec = true;
  Weights engine;
  std::vector<std::string> bad;
  auto sub = connect_engine(g, one_thread<SubscriberOptions>(2), engine, bad);
  ASSERT_NE(sub, nullptr);
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(t.step(v, StepFaults{{"vec"}, false}).ok()) << "version " << v;
  }
  EXPECT_TRUE(engine_at(*sub, engine, 3));
  EXPECT_TRUE(bad.empty()) << bad.front();
  auto v3 = read_manifest_file(JournalLayout(g.journal()).manifest(3));
  ASSERT_TRUE(v3.ok());
  EXPECT_EQ(v3->kind(), proto::STEP_DELTA);
  // A snapshot tensor cannot be written through the hook.
  auto step = t.publisher->begin_step(4);
  ASSERT_TRUE(step.ok());
  std::vector<uint16_t> values(10);
  Status refused =
      (*step)->write(TensorRef::contiguous("vec head", DType::kBF16, t.trainer.vec.data(), 10),
                     TensorRef::contiguous("new", DType::kBF16, values.data(), 10));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("no tensor registered as hooked"), std::string::npos);
}

}  // namespace
}  // namespace weightcast
