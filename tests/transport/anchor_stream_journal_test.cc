// The journal's streamed anchors (JournalWriter::stage_anchor / publish_staged_anchor with a
// StreamingAnchorWriter): a published one is read back verified by a CatchUpReader, refusals
// leave the head, and the shards open in the `safetensors` Python package and equal the model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "tests/transport/anchor_stream_test_util.h"
#include "tests/transport/anchor_test_util.h"
#include "tests/transport/journal_test_model.h"
#include "tests/transport/safetensors_interop.h"
#include "transport/fs/anchor_stream.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_writer.h"

namespace weightcast {
namespace {

using anchor_testing::expect_error;
using anchor_testing::Model;
using anchor_testing::random_pieces;
using anchor_testing::ScratchDir;
using anchor_testing::small_options;
using anchor_testing::specs_of;
using anchor_testing::write_concurrently;

// Writes `model`'s tensors as a streamed anchor of `version` and publishes it.
Result<PublishReport> publish_streamed(JournalWriter& journal, uint64_t version,
                                       const testing::JournalTestModel& model) {
  ASSIGN_OR_RETURN(const std::string staged, journal.stage_anchor(version));
  const std::vector<PublishTensor> tensors = model.tensors();
  ASSIGN_OR_RETURN(auto writer, StreamingAnchorWriter::open(staged, specs_of(tensors),
                                                            journal.anchor_options()));
  std::mt19937_64 rng(version);
  RETURN_IF_ERROR(write_concurrently(*writer, tensors, random_pieces(tensors, rng, 700), 3));
  proto::StepManifest manifest;
  RETURN_IF_ERROR(writer->finish(&manifest));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (writer->checksums()[i] != model.checksum(i)) return internal_error(tensors[i].name);
  }
  return journal.publish_staged_anchor(version, staged, std::move(manifest), "streamed");
}

TEST(JournalStreamedAnchor, PublishedVersionIsReadBackVerified) {
  ScratchDir dir;
  JournalOptions options;
  options.root = dir.sub("journal");
  options.anchor = small_options(2);
  options.anchor.shard_bytes = 8 << 10;  // several shards for the test model
  auto journal = JournalWriter::open(options);
  ASSERT_TRUE(journal.ok()) << journal.status().to_string();
  testing::JournalTestModel model(7);
  auto report = publish_streamed(**journal, 0, model);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_TRUE(report->anchor);
  EXPECT_EQ(report->why_anchor, "streamed");
  EXPECT_GT(report->stored_bytes, 0u);
  ASSERT_TRUE((*journal)->head().has_value());
  EXPECT_EQ((*journal)->head()->version(), 0u);
  EXPECT_EQ((*journal)->head()->anchor_version(), 0u);
  const proto::StepManifest* head = (*journal)->head_manifest();
  ASSERT_NE(head, nullptr);
  EXPECT_GE(head->parts_size(), 2);
  EXPECT_EQ(head->journal_id(), (*journal)->head()->journal_id());
  EXPECT_FALSE(head->writer().empty());
  EXPECT_EQ(head->kind(), proto::STEP_ANCHOR);

  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(options.root, model.destinations(&storage));
  auto caught = reader.catch_up();
  ASSERT_TRUE(caught.ok()) << caught.status().to_string();
  EXPECT_EQ(caught->version, 0u);
  EXPECT_EQ(caught->anchors_loaded, 1u);
  for (size_t i = 0; i < model.size(); ++i) {
    EXPECT_EQ(storage[i], model.bytes(i)) << i;
    EXPECT_EQ(reader.checksum(i), model.checksum(i)) << i;
  }

  // The head manifest is right for what follows: a delta on top of the streamed anchor.
  testing::JournalTestModel before = model;
  model.advance_to(1);
  auto delta = (*journal)->publish(1, model.tensors(), before.tensors());
  ASSERT_TRUE(delta.ok()) << delta.status().to_string();
  EXPECT_FALSE(delta->anchor) << delta->why_anchor;
  caught = reader.catch_up();
  ASSERT_TRUE(caught.ok()) << caught.status().to_string();
  EXPECT_EQ(caught->version, 1u);
  for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(storage[i], model.bytes(i)) << i;

  // And a later streamed anchor after a delta.
  model.advance_to(2);
  ASSERT_TRUE(publish_streamed(**journal, 2, model).ok());
  CatchUpReader fresh(options.root, model.destinations(&storage));
  caught = fresh.catch_up();
  ASSERT_TRUE(caught.ok()) << caught.status().to_string();
  EXPECT_EQ(caught->version, 2u);
  EXPECT_EQ(caught->anchors_loaded, 1u);
  for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(storage[i], model.bytes(i)) << i;
}

TEST(JournalStreamedAnchor, RefusalsLeaveTheHead) {
  ScratchDir dir;
  JournalOptions options;
  options.root = dir.sub("journal");
  options.anchor = small_options(2);
  auto journal = JournalWriter::open(options);
  ASSERT_TRUE(journal.ok()) << journal.status().to_string();
  testing::JournalTestModel model(3);
  ASSERT_TRUE(publish_streamed(**journal, 5, model).ok());

  expect_error((*journal)->stage_anchor(5).status(), StatusCode::kFailedPrecondition,
               {"not newer than 5"});
  proto::StepManifest anchor_like;
  anchor_like.set_kind(proto::STEP_ANCHOR);
  anchor_like.set_index_file(kAnchorIndexFile);
  anchor_like.add_parts()->set_file("model-00001-of-00001.safetensors");

  // Not the staging directory of the version: refused and left alone.
  ASSERT_TRUE(std::filesystem::create_directories(dir.sub("elsewhere")));
  expect_error(
      (*journal)->publish_staged_anchor(6, dir.sub("elsewhere"), anchor_like, "x").status(),
      StatusCode::kInvalidArgument, {"is not the staging directory of version 6"});
  EXPECT_TRUE(std::filesystem::exists(dir.sub("elsewhere")));
  // A manifest that is not a finished anchor: refused, the staged directory removed.
  auto staged = (*journal)->stage_anchor(6);
  ASSERT_TRUE(staged.ok());
  expect_error((*journal)->publish_staged_anchor(6, *staged, proto::StepManifest(), "x").status(),
               StatusCode::kInvalidArgument, {"not that of a finished anchor"});
  EXPECT_FALSE(std::filesystem::exists(*staged));
  // A version the head already passed (its staging directory made by hand): refused, removed.
  const std::string staged4 = options.root + "/.staging/" + JournalLayout::step_dir_name(4);
  ASSERT_TRUE(std::filesystem::create_directories(staged4));
  expect_error((*journal)->publish_staged_anchor(4, staged4, anchor_like, "x").status(),
               StatusCode::kFailedPrecondition, {"not newer than 5"});
  EXPECT_FALSE(std::filesystem::exists(staged4));
  EXPECT_EQ((*journal)->head()->version(), 5u);
  std::vector<std::vector<uint8_t>> storage;
  CatchUpReader reader(options.root, model.destinations(&storage));
  auto caught = reader.catch_up();
  ASSERT_TRUE(caught.ok()) << caught.status().to_string();
  EXPECT_EQ(caught->version, 5u);
}

TEST(AnchorStreamInterop, ShardsOpenInTheSafetensorsPackageAndEqualTheModel) {
  ScratchDir dir;
  const std::string unavailable = testing::safetensors_unavailable(dir.sub("."));
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  // The dtypes torch 1.13 has (it lacks the f8 ones); with 16 KiB shards the first two tensors
  // get files of their own and the rest share a third.
  Model model;
  model.add("model.embed_tokens.weight", DType::kBF16, {40, 300});
  model.add("model.layers.0.self_attn.q_proj.weight", DType::kBF16, {96, 96});
  model.add("model.layers.0.mlp.gate.weight", DType::kF16, {33, 17});
  model.add("model.norm.weight", DType::kF32, {301});
  model.add("model.scale", DType::kF32, {});
  model.add("model.empty", DType::kF32, {0, 3});
  model.add("lm_head.weight", DType::kF64, {12, 7});
  model.add("position_ids", DType::kI64, {1, 64});
  model.add("counts", DType::kI32, {9});
  model.add("small", DType::kI16, {5});
  model.add("signed_codes", DType::kI8, {7});
  model.add("codes", DType::kU8, {11});
  model.add("mask", DType::kBool, {13});
  for (auto& b : model.data.back()) b &= 1;  // valid bools
  const std::span<const AnchorTensor> view = model.view();
  const std::vector<AnchorTensor> tensors(view.begin(), view.end());

  auto writer = StreamingAnchorWriter::open(dir.sub("anchor"), specs_of(tensors), small_options());
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  std::mt19937_64 rng(5);
  ASSERT_TRUE(write_concurrently(**writer, tensors, random_pieces(tensors, rng, 200), 4).ok());
  proto::StepManifest manifest;
  ASSERT_TRUE((*writer)->finish(&manifest).ok());
  ASSERT_GE(manifest.parts_size(), 3);

  std::vector<testing::ExpectedTensor> expected;
  for (size_t i = 0; i < tensors.size(); ++i) {
    expected.push_back({tensors[i].name, tensors[i].dtype, tensors[i].shape, model.data[i]});
  }
  std::string output;
  const int rc =
      testing::check_anchor_with_safetensors(dir.sub("anchor"), expected, dir.sub("."), &output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_NE(output.find("anchor_stream_check: " + std::to_string(tensors.size()) + " tensors in " +
                        std::to_string(manifest.parts_size()) + " shards equal the model"),
            std::string::npos)
      << output;
}

}  // namespace
}  // namespace weightcast
