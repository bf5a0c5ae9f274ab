// The journal end to end: publication of anchors and deltas, a fresh reader joining, a live
// reader following, fallback over corrupt steps, retention with leases.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "codec/base/thread_pool.h"
#include "tests/transport/journal_test_model.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/retention.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;
using testing::ScratchDir;

JournalOptions small_options(const std::string& root) {
  JournalOptions o;
  o.root = root;
  o.anchor_every = 4;
  o.retention.keep_anchors = 10;
  o.delta.part_bytes = 512;  // several parts per delta
  o.anchor.shard_bytes = 8192;
  o.anchor.slice_bytes = 1024;
  o.anchor.threads = 2;
  return o;
}

// Publishes the versions after the writer's head up to `last` (0 first on an empty journal).
void publish_versions(JournalWriter* writer, JournalTestModel* model, uint64_t last) {
  for (uint64_t v = writer->head() ? writer->head()->version() + 1 : 0; v <= last; ++v) {
    auto previous = model->tensors();
    std::vector<std::vector<uint8_t>> keep;  // previous bytes must outlive publish
    for (size_t i = 0; i < model->size(); ++i) keep.push_back(model->bytes(i));
    for (size_t i = 0; i < previous.size(); ++i) previous[i].bytes = keep[i];
    model->advance_to(v);
    auto report = writer->publish(
        v, model->tensors(),
        v == 0 ? std::span<const PublishTensor>{} : std::span<const PublishTensor>(previous));
    ASSERT_TRUE(report.ok()) << report.status().to_string();
  }
}

void expect_holds(const JournalTestModel& model, const CatchUpReader& reader,
                  const std::vector<std::vector<uint8_t>>& storage) {
  ASSERT_TRUE(reader.held().has_value());
  EXPECT_EQ(*reader.held(), model.version());
  for (size_t i = 0; i < model.size(); ++i) {
    EXPECT_EQ(storage[i], model.bytes(i)) << "tensor " << i;
    EXPECT_EQ(reader.checksum(i), model.checksum(i)) << "tensor " << i;
  }
}

TEST(Journal, FreshReaderJoinsFromAnchorPlusDeltas) {
  ScratchDir dir;
  JournalTestModel model(7);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  publish_versions(writer->get(), &model, 6);
  ASSERT_EQ((*writer)->head()->version(), 6u);
  EXPECT_EQ((*writer)->head()->anchor_version(), 4u);

  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(dir.path(), model.destinations(&storage));
  auto plan = reader.plan();
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->anchor, std::optional<uint64_t>(4));
  EXPECT_EQ(plan->deltas, (std::vector<uint64_t>{5, 6}));
  auto report = reader.catch_up();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->anchors_loaded, 1u);
  EXPECT_EQ(report->deltas_applied, 2u);
  expect_holds(model, reader, storage);
}

TEST(Journal, LiveReaderFollowsThroughAnchorsByTheirDeltas) {
  ScratchDir dir;
  JournalTestModel model(8);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 1);
  std::vector<std::vector<uint8_t>> storage;
  ThreadPool pool(2);
  CatchUpOptions options;
  options.pool = &pool;
  CatchUpReader reader(dir.path(), model.destinations(&storage), options);
  ASSERT_TRUE(reader.catch_up().ok());
  publish_versions(writer->get(), &model, 9);  // anchors at 4 and 8 on the way
  auto report = reader.catch_up();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->anchors_loaded, 0u);
  EXPECT_EQ(report->deltas_applied, 8u);
  expect_holds(model, reader, storage);
}

TEST(Journal, AnchorEveryNAndOnDemand) {
  ScratchDir dir;
  JournalTestModel model(9);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 5);
  JournalLayout layout(dir.path());
  std::vector<uint64_t> anchors;
  for (uint64_t v = 0; v <= 5; ++v) {
    auto m = read_manifest_file(layout.manifest(v));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    if (m->kind() == proto::STEP_ANCHOR) anchors.push_back(v);
  }
  EXPECT_EQ(anchors, (std::vector<uint64_t>{0, 4}));
  auto previous = model.tensors();
  std::vector<std::vector<uint8_t>> keep;
  for (size_t i = 0; i < model.size(); ++i) keep.push_back(model.bytes(i));
  for (size_t i = 0; i < previous.size(); ++i) previous[i].bytes = keep[i];
  model.advance_to(6);
  auto r = (*writer)->publish(6, model.tensors(), previous, /*force_anchor=*/true);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->anchor);
  EXPECT_EQ(r->why_anchor, "requested");
}

TEST(Journal, WrongPreviousBytesAreRefusedAndNothingIsPublished) {
  ScratchDir dir;
  JournalTestModel model(10);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 1);
  auto wrong_previous = model.tensors();  // version 1's bytes, claimed as previous of 2? no:
  model.advance_to(2);
  // `wrong_previous` points at the live (now version 2) bytes: not those of version 1.
  auto r = (*writer)->publish(2, model.tensors(), wrong_previous);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("are not those of version 1"), std::string::npos)
      << r.status().to_string();
  EXPECT_EQ((*writer)->head()->version(), 1u);
  auto head = read_head_file(JournalLayout(dir.path()).head());
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->version(), 1u);
}

TEST(Journal, OlderVersionIsRefused) {
  ScratchDir dir;
  JournalTestModel model(11);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 2);
  auto r = (*writer)->publish(2, model.tensors(), model.tensors());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
}

TEST(Journal, SecondWriterIsRefusedNamingTheHolder) {
  ScratchDir dir;
  auto first = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(first.ok());
  auto second = JournalWriter::open(small_options(dir.path()));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("another writer"), std::string::npos);
  first->reset();
  EXPECT_TRUE(JournalWriter::open(small_options(dir.path())).ok());
}

TEST(Journal, ZstdPartsRoundTrip) {
  ScratchDir dir;
  JournalTestModel model(12, 4);
  auto options = small_options(dir.path());
  options.delta.compression = proto::COMPRESSION_ZSTD_BYTE_PLANES;
  auto writer = JournalWriter::open(options);
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 3);
  auto m = read_manifest_file(JournalLayout(dir.path()).manifest(3));
  ASSERT_TRUE(m.ok());
  ASSERT_GT(m->parts_size(), 0);
  EXPECT_EQ(m->parts(0).compression(), proto::COMPRESSION_ZSTD_BYTE_PLANES);
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(dir.path(), model.destinations(&storage));
  ASSERT_TRUE(reader.catch_up().ok());
  expect_holds(model, reader, storage);
}

TEST(Journal, MismatchedDestinationsAreNamed) {
  ScratchDir dir;
  JournalTestModel model(13);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 0);
  std::vector<std::vector<uint8_t>> storage;
  auto dests = model.destinations(&storage);
  dests[2].name = "not.in.the.model";
  CatchUpReader reader(dir.path(), dests);
  auto r = reader.catch_up();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not.in.the.model"), std::string::npos);
  EXPECT_FALSE(reader.held().has_value());
}

TEST(Journal, FollowerReachesVersionsPublishedWhileItWaits) {
  ScratchDir dir;
  JournalTestModel model(14);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 0);
  JournalTestModel follower_model(14);  // the follower's reference, advanced at the end
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(dir.path(), follower_model.destinations(&storage));
  std::thread publisher([&] {
    for (uint64_t v = 1; v <= 6; ++v) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      publish_versions(writer->get(), &model, v);
    }
  });
  auto r = reader.follow(6, std::chrono::steady_clock::now() + std::chrono::seconds(20),
                         std::chrono::milliseconds(2));
  publisher.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  follower_model.advance_to(6);
  expect_holds(follower_model, reader, storage);
}

TEST(Journal, FollowGivesUpAtTheDeadline) {
  ScratchDir dir;
  JournalTestModel model(15);
  auto writer = JournalWriter::open(small_options(dir.path()));
  ASSERT_TRUE(writer.ok());
  publish_versions(writer->get(), &model, 1);
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(dir.path(), model.destinations(&storage));
  auto r = reader.follow(5, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("holding 1"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace weightcast
