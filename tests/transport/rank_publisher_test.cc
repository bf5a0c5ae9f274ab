// Four publisher ranks in four processes publish one model through one journal
// (rank_publisher.h), each from the FSDP-like ranges it owns: anchors and deltas commit once,
// readers holding whole tensors and slices follow bit-exact. A rank that dies before a version
// leaves it uncommitted (rank 0 names it), and the ranks go on with the anchor rank 0 then
// decides on once it is back; a rank that restarted refuses a delta, and rank 0 gives up at once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "tests/transport/journal_ranks_util.h"
#include "tests/transport/journal_robustness_util.h"
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
             const std::vector<Step>& plan) {
  JournalTestModel model(kSeed);
  const auto split = testing::fsdp_split(model);
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
    const size_t es = dtype_size(tensors[p.tensor].dtype);
    ranges.push_back(
        {tensors[p.tensor].name, p.first, p.count, model.bytes(p.tensor).data() + p.first * es});
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
                           const std::vector<std::vector<Step>>& plans) {
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < kRanks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(run_rank(root, r, wait, plans[r]));
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
  auto unknown = RankPublisher::open(o, specs, {{"no.such.weight", 0, 1, data}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'no.such.weight' is not in the model"),
            std::string::npos);
  o.rank = kRanks;
  EXPECT_FALSE(RankPublisher::open(o, specs, {}).ok());
}

}  // namespace
}  // namespace weightcast
