// The subscriber writing the engine's tensors in place (src/endpoint/subscriber.h), in one
// process against a coordinator thread: a version whose last tensor fails after the tensors
// before it (strided halves of the engine's packed parameter) were written is reverted, the
// window closes on the previous version (after_apply sees the engine byte-identical to it),
// the version is nacked and then recovered through an anchor; an engine that claims a version
// it holds is taken at its word only after every checksum matches, and one whose weights
// differ from its claim is brought to the head through an anchor, in place.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "tests/group/trainer_side.h"
#include "tests/transport/record_forgery.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_layout.h"

namespace weightcast {
namespace {

using namespace weightcast::testing;
using std::chrono::seconds;

// The engine's tensors as every window left them: "after v: ok" when they equal version v.
struct WindowLog {
  std::mutex mu;
  std::vector<std::string> calls;
  void attach(SubscriberOptions* so, Weights* engine) {
    so->before_apply = [this](uint64_t v) {
      std::lock_guard<std::mutex> l(mu);
      calls.push_back("before " + std::to_string(v));
    };
    so->after_apply = [this, engine](uint64_t v) {
      Weights expect;
      expect.set(v);
      const bool equal = engine->vec == expect.vec && engine->packed == expect.packed;
      std::lock_guard<std::mutex> l(mu);
      calls.push_back("after " + std::to_string(v) + (equal ? ": ok" : ": torn"));
    };
  }
  std::string joined() {
    std::lock_guard<std::mutex> l(mu);
    std::string s;
    for (const auto& c : calls) s += c + "; ";
    return s;
  }
};

std::unique_ptr<Subscriber> connect(const TestGroup& g, SubscriberOptions so, Weights& engine) {
  auto s = Subscriber::create(g.config(), std::move(so));
  if (!s.ok()) return nullptr;
  for (const auto& r : engine.refs()) {
    if (!(*s)->register_tensor(r).ok()) return nullptr;
  }
  if (!(*s)->connect().ok()) return nullptr;
  return std::move(s).value();
}

TEST(InPlaceSubscriber, AVersionWhoseLastTensorFailsIsRevertedNackedAndRecovered) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 100;
  TestGroup g(spec);
  // Version 3's record of "vec" (tensor 2, after the two packed halves) claims a wrong target
  // checksum; everything before the first write still checks out.
  PublisherOptions po = one_thread<PublisherOptions>(1);
  Status forged = ok_status();
  po.before_offer = [&](uint64_t v) {
    if (v != 3) return;
    forged = forge_record(JournalLayout(g.journal()), 3, 2,
                          [](DeltaRecordHeader* h, std::vector<std::vector<uint8_t>>*) {
                            h->target_checksum ^= 0x2468;
                          });
  };
  TrainerSide t(g, po);
  ASSERT_TRUE(t.ok()) << t.why();
  Weights engine;
  WindowLog window;
  SubscriberOptions so = one_thread<SubscriberOptions>(2);
  window.attach(&so, &engine);
  auto sub = connect(g, so, engine);
  ASSERT_NE(sub, nullptr);
  ASSERT_TRUE(t.publish_committed(0, 3));
  ASSERT_TRUE(sub->wait_for_version(2, in(seconds(30))).ok());
  t.trainer.set(3);
  ASSERT_TRUE(t.publisher->publish(3)->wait_published(in(seconds(30))).ok());
  ASSERT_TRUE(forged.ok()) << forged.to_string();
  ASSERT_TRUE(eventually([&] { return sub->stats().nacks >= 1; }, seconds(20)));
  // The window opened for 3 and closed on 2, with the engine byte-identical to version 2.
  EXPECT_NE(window.joined().find("before 3; after 2: ok; "), std::string::npos) << window.joined();
  EXPECT_EQ(sub->current_version(), std::optional<uint64_t>(2));
  EXPECT_GT(sub->stats().bytes_written, 0u);
  // An anchor brings it past the forged step.
  t.trainer.set(4);
  auto h = t.publisher->publish(4, /*force_anchor=*/true);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(sub->wait_for_version(4, in(seconds(30))).ok());
  Weights expect;
  expect.set(4);
  EXPECT_EQ(engine.packed, expect.packed);
  EXPECT_EQ(engine.vec, expect.vec);
  EXPECT_EQ(window.joined().find("torn"), std::string::npos) << window.joined();
}

TEST(InPlaceSubscriber, AClaimedVersionIsVerifiedAndAFalseClaimIsReplacedByTheAnchor) {
  GroupSpec spec;
  spec.subscribers = 2;
  spec.anchor_every = 100;
  TestGroup g(spec);
  TrainerSide t(g);
  ASSERT_TRUE(t.ok()) << t.why();
  ASSERT_TRUE(t.publish_committed(0, 4));
  for (const bool truthful : {true, false}) {
    Weights engine;
    engine.set(3);  // loaded by the engine itself
    if (!truthful) engine.vec[500] ^= 1;
    SubscriberOptions so = one_thread<SubscriberOptions>(truthful ? 2 : 3);
    so.claimed_version = 3;
    auto sub = connect(g, so, engine);
    ASSERT_NE(sub, nullptr);
    ASSERT_TRUE(sub->wait_for_version(3, in(seconds(30))).ok());
    const SubscriberStats stats = sub->stats();
    EXPECT_EQ(stats.claim_verified, truthful);
    EXPECT_EQ(stats.anchors_loaded, truthful ? 0u : 1u);
    // A truthful engine has nothing written at all; the other one gets the whole anchor.
    if (truthful) {
      EXPECT_EQ(stats.bytes_written, 0u);
    } else {
      EXPECT_GE(stats.bytes_written, (4 * 64 + 1000) * 2u);
    }
    Weights expect;
    expect.set(3);
    EXPECT_EQ(engine.vec, expect.vec) << (truthful ? "truthful" : "false claim");
    EXPECT_EQ(engine.packed, expect.packed);
    sub->stop();
  }
}

// A publication that fails after the encoder advanced the publisher's snapshot (a part write
// refused, as on a full disk) leaves the snapshot between versions: the next version is an
// anchor (not consecutive with the head), written whole, and the engine gets the trainer's
// bytes again.
TEST(InPlaceSubscriber, APublicationThatFailsMidWayLeavesNoWrongSnapshotBehind) {
  GroupSpec spec;
  spec.subscribers = 1;
  spec.anchor_every = 100;
  TestGroup g(spec);
  PublisherOptions po = one_thread<PublisherOptions>(1);
  std::atomic<bool> full{false};
  po.before_part_write = [&](const std::string& file, uint64_t) {
    return full.load() ? io_error("cannot write '" + file + "': No space left on device (injected)")
                       : ok_status();
  };
  TrainerSide t(g, po);
  ASSERT_TRUE(t.ok()) << t.why();
  Weights engine;
  WindowLog window;
  SubscriberOptions so = one_thread<SubscriberOptions>(2);
  window.attach(&so, &engine);
  auto sub = connect(g, so, engine);
  ASSERT_NE(sub, nullptr);
  ASSERT_TRUE(t.publish_committed(0, 3));
  full = true;
  t.trainer.set(3);
  auto failed = t.publisher->publish(3);
  ASSERT_TRUE(failed.ok());
  const Status refused = failed->wait_committed(in(seconds(20)));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("No space left"), std::string::npos) << refused.to_string();
  full = false;
  ASSERT_TRUE(t.publish_committed(4, 6));
  auto v4 = read_manifest_file(JournalLayout(g.journal()).manifest(4));
  ASSERT_TRUE(v4.ok()) << v4.status().to_string();
  EXPECT_EQ(v4->kind(), proto::STEP_ANCHOR);
  ASSERT_TRUE(sub->wait_for_version(5, in(seconds(30))).ok());
  Weights expect;
  expect.set(5);
  EXPECT_EQ(engine.packed, expect.packed);
  EXPECT_EQ(engine.vec, expect.vec);
  EXPECT_EQ(window.joined().find("torn"), std::string::npos) << window.joined();
}

}  // namespace
}  // namespace weightcast
