// Four publisher ranks in four processes publish one model through one journal
// (rank_publisher.h), each from the FSDP-like ranges it owns, or from the blocks a
// tensor-parallel rank owns (boxes along the last dimension): anchors and deltas commit once,
// readers holding whole tensors and slices follow bit-exact; boxes that overlap, leave a hole
// or lie about their place are refused by name. A rank that dies before a version
// leaves it uncommitted (rank 0 names it), and the ranks go on with the anchor rank 0 then
// decides on once it is back; a rank that restarted refuses a delta, and rank 0 gives up at once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <thread>

#include "tests/transport/journal_ranks_util.h"
#include "tests/transport/journal_robustness_util.h"
#include "tests/transport/safetensors_interop.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/rank_fragments.h"
#include "transport/fs/rank_plan.h"
#include "transport/fs/rank_publisher.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;

constexpr uint64_t kSeed = 73;
constexpr uint32_t kRanks = 4;

// One rank's run: `plan` lists (version, force_anchor, expect_failure) in order; a negative
// version closes the publisher and sleeps -version ms (a restart). Exit code 0 when every
// publication did what the plan expects.
struct Step {
  int64_t version;
  bool force_anchor = false;
  bool fails = false;
  bool either = false;  // succeeding and failing are both right (fails is then ignored)
};

int run_rank(const std::string& root, uint32_t rank, std::chrono::milliseconds wait,
             const std::vector<Step>& plan, bool tensor_parallel = false) {
  JournalTestModel model(kSeed);
  const auto split = testing::fsdp_split(model);
  std::vector<testing::Block> blocks =
      tensor_parallel ? testing::tp_blocks(model, rank, kRanks) : std::vector<testing::Block>{};
  const auto copy_blocks = [&] {
    for (testing::Block& b : blocks) {  // in place: the publisher reads the rank's memory
      const std::vector<uint8_t> now =
          testing::gather(model.bytes(b.tensor), model.tensors()[b.tensor].shape, b.slice,
                          dtype_size(model.tensors()[b.tensor].dtype));
      b.bytes.resize(now.size());
      std::copy(now.begin(), now.end(), b.bytes.begin());
    }
  };
  copy_blocks();
  RankPublisherOptions o;
  o.root = root;
  o.rank = rank;
  o.ranks = kRanks;
  o.anchor_every = 3;
  // Small pieces: each rank's ranges become many range records (readers of every layout then
  // meet ranges that start and end inside their slices).
  o.piece_elements = 700;
  // Rank 0 waits `wait` for the others' parts; they wait longer for its staged anchors, which
  // come after its wait for a version before (the failing one) ran out.
  o.wait = rank == 0 ? wait : 5 * wait;
  o.journal = testing::robustness_options(root, 3);
  o.journal.declared_slices = testing::declared;
  const auto tensors = model.tensors();
  std::vector<OwnedRange> ranges;
  for (const testing::Owned& p : split[rank]) {
    if (tensor_parallel) break;
    const size_t es = dtype_size(tensors[p.tensor].dtype);
    ranges.push_back(
        {tensors[p.tensor].name, p.first, p.count, model.bytes(p.tensor).data() + p.first * es});
  }
  for (const testing::Block& b : blocks) {
    OwnedRange r{tensors[b.tensor].name, b.slice.begin, b.slice.end - b.slice.begin,
                 b.bytes.data()};
    if (b.slice.kind == TensorSlice::Kind::kBox) r.box = b.slice;
    ranges.push_back(r);
  }
  auto open = [&] { return RankPublisher::open(o, testing::specs_of(model), ranges); };
  auto publisher = open();
  if (!publisher.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", rank, publisher.status().message().c_str());
    return 2;
  }
  for (const Step& s : plan) {
    if (s.version < 0) {
      publisher->reset();
      std::this_thread::sleep_for(std::chrono::milliseconds(-s.version));
      publisher = open();
      if (!publisher.ok()) return 3;
      continue;
    }
    model.advance_to(static_cast<uint64_t>(s.version));
    copy_blocks();
    auto report = (*publisher)->publish(static_cast<uint64_t>(s.version), s.force_anchor);
    if (!s.either && report.ok() == s.fails) {
      std::fprintf(stderr, "rank %u, version %lld: %s\n", rank, static_cast<long long>(s.version),
                   report.ok() ? "published, expected to fail" : report.status().message().c_str());
      return 4;
    }
    if (!report.ok())
      std::fprintf(stderr, "rank %u: %s\n", rank, report.status().message().c_str());
  }
  return 0;
}

// Runs the ranks in processes of their own; their exit codes.
std::vector<int> run_ranks(const std::string& root, std::chrono::milliseconds wait,
                           const std::vector<std::vector<Step>>& plans,
                           bool tensor_parallel = false) {
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < kRanks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_rank(root, r, wait, plans[r], tensor_parallel));
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return codes;
}

// A reader of the journal at `root`, whole or holding part `part` of layout `l`, at `version`:
// empty when bit-exact with the model.
std::string follow(const std::string& root, uint64_t version, const testing::Layout* l,
                   int64_t part) {
  JournalTestModel model(kSeed);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<ReaderDestination> d = model.destinations(&storage);
  for (size_t i = 0; i < d.size() && l != nullptr; ++i) {
    d[i].slice = testing::slice_of(*l, part, d[i].name, d[i].shape);
    storage[i].assign(slice_elements(d[i].shape, *d[i].slice) * dtype_size(d[i].dtype), 0);
    d[i].bytes = storage[i];
  }
  CatchUpReader reader(root, std::move(d));
  auto report = reader.catch_up(version);
  if (!report.ok()) return report.status().message();
  model.advance_to(version);
  const auto tensors = model.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSlice s = l != nullptr
                              ? testing::slice_of(*l, part, tensors[i].name, tensors[i].shape)
                              : TensorSlice::whole(tensors[i].shape);
    if (storage[i] !=
        testing::gather(model.bytes(i), tensors[i].shape, s, dtype_size(tensors[i].dtype))) {
      return "tensor '" + tensors[i].name + "' differs at version " + std::to_string(version);
    }
  }
  return "";
}

TEST(RankPublisher, FourRankProcessesPublishAnchorsAndDeltasThatEveryLayoutFollows) {
  testing::ScratchDir dir;
  std::vector<Step> plan;
  for (int64_t v = 0; v <= 5; ++v) plan.push_back({v});
  const auto codes = run_ranks(dir.path(), std::chrono::milliseconds(30000),
                               std::vector<std::vector<Step>>(kRanks, plan));
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  auto head = read_head_file(JournalLayout(dir.path()).head());
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->version(), 5u);
  EXPECT_EQ(head->anchor_version(), 3u);  // anchors at 0 and 3
  for (uint64_t v = 0; v <= 5; ++v) {
    auto m = read_manifest_file(JournalLayout(dir.path()).step(v) + "/MANIFEST");
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->kind(), v % 3 == 0 ? proto::STEP_ANCHOR : proto::STEP_DELTA) << v;
  }
  EXPECT_EQ(follow(dir.path(), 5, nullptr, 0), "");
  for (const testing::Layout& l : testing::layouts()) {
    for (int64_t part = 0; part < l.parts; ++part) {
      EXPECT_EQ(follow(dir.path(), 5, &l, part), "") << l.name << " part " << part;
    }
  }
}

TEST(RankPublisher, FourTensorParallelRanksPublishBlocksThatEveryLayoutFollows) {
  testing::ScratchDir dir;
  std::vector<Step> plan;
  for (int64_t v = 0; v <= 5; ++v) plan.push_back({v});
  const auto codes = run_ranks(dir.path(), std::chrono::milliseconds(30000),
                               std::vector<std::vector<Step>>(kRanks, plan), true);
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  auto delta = read_manifest_file(JournalLayout(dir.path()).step(4) + "/MANIFEST");
  ASSERT_TRUE(delta.ok()) << delta.status().message();
  size_t boxes = 0, flats = 0;
  for (const auto& t : delta->tensors()) {
    for (const auto& r : t.ranges()) (r.has_box() ? boxes : flats) += 1;
  }
  // q_proj's column blocks in pieces of 21 rows (the last row of each alone, one run, is a
  // flat range), the piece across row 32 cut there (tp2 dim 0 declares rows [0, 32) and
  // [32, 64): rank_cells.h), the experts' blocks; the vectors' flat ranges.
  EXPECT_EQ(boxes, 4 * 4 + 4u);
  EXPECT_GT(flats, 4u);
  // Anchor 3, which the ranks wrote block by block, is one checkpoint the `safetensors`
  // package reads as the model at version 3.
  if (const std::string unavailable = testing::safetensors_unavailable(dir.path());
      unavailable.empty()) {
    JournalTestModel three(kSeed);
    three.advance_to(3);
    std::vector<testing::ExpectedTensor> expected;
    for (size_t i = 0; i < three.size(); ++i) {
      const auto t = three.tensors()[i];
      expected.push_back({t.name, t.dtype, t.shape, three.bytes(i)});
    }
    std::string output;
    EXPECT_EQ(testing::check_anchor_with_safetensors(JournalLayout(dir.path()).step(3), expected,
                                                     dir.path(), &output),
              0)
        << output;
  } else {
    std::printf("not checked with the safetensors package: %s\n", unavailable.c_str());
  }
  // Anchors (0 and 3) and deltas, from the start and from the newest anchor.
  for (const uint64_t v : {2u, 5u}) {
    EXPECT_EQ(follow(dir.path(), v, nullptr, 0), "") << v;
    for (const testing::Layout& l : testing::layouts()) {
      for (int64_t part = 0; part < l.parts; ++part) {
        EXPECT_EQ(follow(dir.path(), v, &l, part), "") << l.name << " part " << part << " v" << v;
      }
    }
  }
}

TEST(RankPublisher, BoxesThatOverlapLeaveAHoleLieOrComeOutOfOrderAreRefusedByName) {
  testing::ScratchDir dir;
  const auto codes = run_ranks(dir.path(), std::chrono::milliseconds(30000),
                               std::vector<std::vector<Step>>(kRanks, {{0}, {1}}), true);
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  auto good = read_manifest_file(JournalLayout(dir.path()).step(1) + "/MANIFEST");
  ASSERT_TRUE(good.ok()) << good.status().message();
  int experts = -1;
  for (int i = 0; i < good->tensors_size(); ++i) {
    if (good->tensors(i).name() == "layers.0.mlp.experts.weight") experts = i;
  }
  ASSERT_GE(experts, 0);
  ASSERT_TRUE(good->tensors(experts).ranges(1).has_box());  // [0:4, 0:33, 5:9]
  const auto refused = [&](const std::function<void(proto::RangeRecord*)>& damage, int range,
                           const std::string& words) {
    proto::StepManifest m = *good;
    damage(m.mutable_tensors(experts)->mutable_ranges(range));
    const Status s = check_manifest(m, "damaged");
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("'layers.0.mlp.experts.weight'"), std::string::npos);
  };
  // Rank 1's block one column wider, starting one column earlier: it meets rank 0's.
  refused(
      [](proto::RangeRecord* r) {
        r->mutable_box()->set_offsets(2, 4);
        r->mutable_box()->set_sizes(2, 5);
        r->set_range_offset(4);
        r->set_range_elements(4 * 33 * 5);
      },
      1, "the slices of rank 0 ([0:4, 0:33, 0:5]) and rank 1 ([0:4, 0:33, 4:9]) overlap");
  refused(
      [](proto::RangeRecord* r) {
        r->mutable_box()->set_sizes(2, 3);
        r->set_range_elements(4 * 33 * 3);
      },
      1, "no rank holds element [0, 0, 8]");
  refused([](proto::RangeRecord* r) { r->set_range_offset(6); }, 1,
          "rank 1 [0:4, 0:33, 5:9]: its first element and volume are not [6, +528)");
  refused([](proto::RangeRecord* r) { r->mutable_box()->set_sizes(1, 40); }, 1,
          "leaves the tensor along dimension 1");
  refused([](proto::RangeRecord* r) { r->mutable_box()->set_flat(true); }, 1, "is a flat range");
  refused([](proto::RangeRecord* r) { r->set_range_offset(20); }, 1, "out of order");
}

TEST(RankPublisher, ARankThatDiesLeavesItsVersionUncommittedAndAForcedAnchorResumes) {
  testing::ScratchDir dir;
  // Rank 2 dies after version 1 and is back after rank 0 gave up on version 2; rank 0 then
  // makes version 3 an anchor (nobody forces it) and version 4 a delta, which every rank follows.
  std::vector<std::vector<Step>> plans(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    plans[r] = {{0}, {1}};
    if (r == 2) {
      plans[r].push_back({-3000});
    } else {
      plans[r].push_back({2, false, r == 0});
    }
    plans[r].push_back({3});
    plans[r].push_back({4});
  }
  const auto codes = run_ranks(dir.path(), std::chrono::milliseconds(2000), plans);
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  const JournalLayout layout(dir.path());
  EXPECT_FALSE(read_manifest_file(layout.step(2) + "/MANIFEST").ok()) << "version 2 committed";
  auto head = read_head_file(layout.head());
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->version(), 4u);
  EXPECT_EQ(head->anchor_version(), 3u);
  EXPECT_EQ(follow(dir.path(), 4, nullptr, 0), "");
  EXPECT_EQ(follow(dir.path(), 4, &testing::layouts()[1], 1), "");
  auto third = read_manifest_file(layout.step(3) + "/MANIFEST");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->kind(), proto::STEP_ANCHOR);
}

TEST(RankPublisher, ARankThatRestartedRefusesTheNextDeltaAndRankZeroGivesUpAtOnce) {
  testing::ScratchDir dir;
  // Rank 1 restarts between versions 1 and 2 (no snapshot): it refuses delta 2, rank 0 fails it
  // long before its 20 s wait, and version 3 is an anchor every rank writes. Ranks 2 and 3 may
  // still be writing their parts of 2 when rank 0 removes them: either outcome is right.
  std::vector<std::vector<Step>> plans(kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) {
    plans[r] = {{0}, {1}};
    if (r == 1) plans[r].push_back({-1});
    plans[r].push_back({2, false, r == 0 || r == 1, r >= 2});
    plans[r].push_back({3});
    plans[r].push_back({4});
  }
  const auto started = std::chrono::steady_clock::now();
  const auto codes = run_ranks(dir.path(), std::chrono::milliseconds(20000), plans);
  const auto took = std::chrono::steady_clock::now() - started;
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_LT(took, std::chrono::seconds(15)) << "rank 0 waited for the refused part";
  const JournalLayout layout(dir.path());
  EXPECT_FALSE(read_manifest_file(layout.step(2) + "/MANIFEST").ok()) << "version 2 committed";
  auto third = read_manifest_file(layout.step(3) + "/MANIFEST");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->kind(), proto::STEP_ANCHOR);
  EXPECT_EQ(follow(dir.path(), 4, nullptr, 0), "");
  EXPECT_EQ(follow(dir.path(), 4, &testing::layouts()[0], 0), "");
}

TEST(RankPublisher, ARankWithoutASnapshotRefusesADeltaAndBadRangesAreRefusedByName) {
  testing::ScratchDir dir;
  JournalTestModel model(kSeed);
  RankPublisherOptions o;
  o.root = dir.path();
  o.rank = 1;
  o.ranks = kRanks;
  const auto specs = testing::specs_of(model);
  const uint8_t* data = model.bytes(0).data();
  auto p = RankPublisher::open(o, specs, {{specs[0].name, 0, 16, data}});
  ASSERT_TRUE(p.ok()) << p.status().message();
  // Rank 0 announces version 1 as a delta; rank 1 holds no snapshot of version 0.
  const JournalLayout layout(dir.path());
  ASSERT_TRUE(put_rank_delta_plan(layout, 1).ok());
  auto report = (*p)->publish(1);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("publisher rank 1, version 1: this rank holds no "
                                           "snapshot of version 0"),
            std::string::npos)
      << report.status().message();
  // The refusal is where rank 0 waits for the fragment, which then fails with its reason.
  const Status waited = wait_for_rank_fragments(layout, 1, 2, std::chrono::milliseconds(0));
  EXPECT_EQ(waited.code(), StatusCode::kFailedPrecondition) << waited.message();
  EXPECT_NE(waited.message().find("publisher rank 1 refused to write its part: this rank holds "
                                  "no snapshot of version 0"),
            std::string::npos)
      << waited.message();
  // With no plan for version 2 it waits for rank 0 and names it.
  o.wait = std::chrono::milliseconds(50);
  auto waiting = RankPublisher::open(o, specs, {{specs[0].name, 0, 16, data}});
  ASSERT_TRUE(waiting.ok());
  auto unplanned = (*waiting)->publish(2);
  EXPECT_EQ(unplanned.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(unplanned.status().message().find("the lead rank (0) did not start it"),
            std::string::npos)
      << unplanned.status().message();
  auto outside = RankPublisher::open(o, specs, {{specs[0].name, 64 * 128 - 8, 16, data}});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("'" + specs[0].name + "' elements [8184, 8200)"),
            std::string::npos)
      << outside.status().message();
  OwnedRange wide{specs[0].name, 0, 0, data, TensorSlice::box({0, 100}, {64, 29})};
  auto past = RankPublisher::open(o, specs, {wide});
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("slice [0:64, 100:129] leaves the tensor along "
                                         "dimension 1"),
            std::string::npos)
      << past.status().message();
  wide.box = TensorSlice::box({0, 96}, {64, 32});
  wide.count = 100;
  auto miscounted = RankPublisher::open(o, specs, {wide});
  ASSERT_FALSE(miscounted.ok());
  EXPECT_NE(miscounted.status().message().find("holds 2048 elements, not 100"), std::string::npos)
      << miscounted.status().message();
  auto unknown = RankPublisher::open(o, specs, {{"no.such.weight", 0, 1, data}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'no.such.weight' is not in the model"),
            std::string::npos);
  o.rank = kRanks;
  EXPECT_FALSE(RankPublisher::open(o, specs, {}).ok());
}

}  // namespace
}  // namespace weightcast
