// Anchors of the filesystem journal under damage: the readers (read_anchor_tensor, read_anchor,
// verify_anchor, validate_anchor_manifest) refuse a flipped byte, a truncated or missing shard,
// a wrong checksum, a wrong index json or shard header, and every kind of lying manifest, each
// with the status code the API promises and an error naming the culprit.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "tests/transport/anchor_test_util.h"
#include "transport/fs/anchor_reader.h"
#include "transport/fs/anchor_writer.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using anchor_testing::Bytes;
using anchor_testing::expect_error;
using anchor_testing::Model;
using anchor_testing::read_file;
using anchor_testing::ScratchDir;
using anchor_testing::sharded_model;
using anchor_testing::small_options;
using anchor_testing::write_file;

// A written sharded anchor for the damage tests.
class AnchorDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = sharded_model();
    dir_ = tmp_.sub("a");
    ASSERT_TRUE(write_anchor(dir_, model_.view(), small_options(), &manifest_).ok());
  }
  std::string shard_path(int s) const { return dir_ + "/" + manifest_.parts(s).file(); }
  Status read_all() {
    std::vector<Bytes> out(model_.data.size());
    std::vector<std::span<uint8_t>> dests;
    for (size_t i = 0; i < out.size(); ++i)
      dests.emplace_back((out[i] = Bytes(model_.data[i].size())));
    return read_anchor(dir_, manifest_, dests);
  }

  ScratchDir tmp_;
  Model model_;
  std::string dir_;
  proto::StepManifest manifest_;
};

TEST_F(AnchorDamage, FlippedTensorByteIsDataLossNamingFileAndOffset) {
  const auto& t = manifest_.tensors(2);  // w2: 40 KiB, ten 4 KiB extents
  Bytes file = read_file(shard_path(t.part()));
  const uint64_t flipped = t.offset() + 3 * 4096 + 17;
  file[flipped] ^= 0x40;
  write_file(shard_path(t.part()), file);
  Bytes dest(t.bytes());
  const std::string extent_start = std::to_string(t.offset() + 3 * 4096);
  expect_error(read_anchor_tensor(dir_, manifest_, 2, dest), StatusCode::kDataLoss,
               {manifest_.parts(t.part()).file(), extent_start, "XXH3"});
  expect_error(read_all(), StatusCode::kDataLoss, {manifest_.parts(t.part()).file()});
  expect_error(verify_anchor(dir_, manifest_), StatusCode::kDataLoss, {extent_start});
  Bytes other(manifest_.tensors(0).bytes());
  EXPECT_TRUE(read_anchor_tensor(dir_, manifest_, 0, other).ok());  // other shards still read
}

TEST_F(AnchorDamage, TruncatedShardIsDataLoss) {
  const uint64_t cut = manifest_.parts(3).bytes() - 100;
  fs::resize_file(shard_path(3), cut);
  Bytes dest(manifest_.tensors(5).bytes());
  expect_error(read_anchor_tensor(dir_, manifest_, 5, dest), StatusCode::kDataLoss,
               {manifest_.parts(3).file(), std::to_string(cut)});
  expect_error(verify_anchor(dir_, manifest_), StatusCode::kDataLoss, {manifest_.parts(3).file()});
}

TEST_F(AnchorDamage, MissingShardIsNotFoundNamingPath) {
  fs::remove(shard_path(1));
  Bytes dest(manifest_.tensors(2).bytes());
  expect_error(read_anchor_tensor(dir_, manifest_, 2, dest), StatusCode::kNotFound,
               {shard_path(1)});
  expect_error(read_all(), StatusCode::kNotFound, {shard_path(1)});
  expect_error(verify_anchor(dir_, manifest_), StatusCode::kNotFound, {shard_path(1)});
}

TEST_F(AnchorDamage, WrongChecksumIsChecksumMismatchNamingTensor) {
  manifest_.mutable_tensors(4)->set_checksum(manifest_.tensors(4).checksum() + 1);
  Bytes dest(manifest_.tensors(4).bytes());
  expect_error(read_anchor_tensor(dir_, manifest_, 4, dest), StatusCode::kChecksumMismatch, {"w4"});
  expect_error(verify_anchor(dir_, manifest_), StatusCode::kChecksumMismatch, {"w4"});
}

TEST_F(AnchorDamage, IndexJsonMustNameEveryTensorWithItsFile) {
  auto index = nlohmann::json::parse(read_file(dir_ + "/model.safetensors.index.json"));
  index["weight_map"]["w0"] = manifest_.parts(3).file();
  const std::string text = index.dump();
  write_file(dir_ + "/model.safetensors.index.json", Bytes(text.begin(), text.end()));
  expect_error(verify_anchor(dir_, manifest_), StatusCode::kDataLoss, {"w0", "index"});
  EXPECT_TRUE(read_all().ok());  // readers go by the manifest
}

TEST_F(AnchorDamage, ShardHeaderMustAgreeWithManifest) {
  // Same bytes, another shape: consistent on its own, refused against the file's header.
  manifest_.mutable_tensors(5)->clear_shape();
  manifest_.mutable_tensors(5)->add_shape(10 * 512);
  ASSERT_TRUE(validate_anchor_manifest(manifest_).ok());
  expect_error(verify_anchor(dir_, manifest_), StatusCode::kDataLoss,
               {"'w5'", manifest_.parts(3).file(), "disagrees with the header"});
}

TEST_F(AnchorDamage, ManifestLiesAreCaughtBeforeReading) {
  ASSERT_TRUE(validate_anchor_manifest(manifest_).ok());
  struct Lie {
    std::string needle;  // what the error must name
    std::function<void(proto::StepManifest*)> apply;
  };
  // Shard 0 holds w0 (5 KiB: extents 1 and 2 of 4 and 1 KiB) and then w1 (3 KiB: extent 3).
  const std::vector<Lie> lies = {
      {"10 bytes disagree", [](auto* m) { m->mutable_tensors(0)->set_bytes(10); }},
      {"'w0' (shard 'model-00001-of-00004.safetensors' offset 170) does not start",
       [](auto* m) { m->mutable_tensors(0)->set_offset(m->tensors(0).offset() + 2); }},
      {"'w1' (shard 'model-00001-of-00004.safetensors' offset 5290): 3072 bytes run past",
       [](auto* m) { m->mutable_tensors(1)->set_offset(m->tensors(1).offset() + 2); }},
      {"'w3'", [](auto* m) { m->mutable_tensors(3)->set_part(0); }},
      {"part 9 does not exist", [](auto* m) { m->mutable_tensors(3)->set_part(9); }},
      {"3072 elements", [](auto* m) { m->mutable_tensors(0)->set_shape(0, 6); }},
      {"unknown dtype 0",
       [](auto* m) { m->mutable_tensors(0)->set_dtype(proto::DTYPE_UNSPECIFIED); }},
      {"'w0' appears twice", [](auto* m) { m->mutable_tensors(1)->set_name("w0"); }},
      {"name is empty", [](auto* m) { m->mutable_tensors(1)->set_name(""); }},
      {"shard 'model-00002-of-00004.safetensors' end at offset",
       [](auto* m) {
         m->mutable_parts(1)->set_bytes(m->parts(1).bytes() + 8);
         m->mutable_parts(1)->set_raw_bytes(m->parts(1).bytes());
       }},
      {"is compressed",
       [](auto* m) { m->mutable_parts(1)->set_compression(proto::COMPRESSION_ZSTD_BYTE_PLANES); }},
      {"'../x.safetensors' is not a plain",
       [](auto* m) { m->mutable_parts(0)->set_file("../x.safetensors"); }},
      {"'..' is not a plain", [](auto* m) { m->mutable_parts(0)->set_file(".."); }},
      {"'model-00001-of-00004.safetensors' is listed twice",
       [](auto* m) { m->mutable_parts(1)->set_file(m->parts(0).file()); }},
      {"end at offset 5388", [](auto* m) { m->mutable_extents(3)->set_bytes(100); }},
      {"end at offset 5288", [](auto* m) { m->mutable_extents(3)->set_shard(3); }},
      {"extent 4 names shard 2 after shard 0",
       [](auto* m) { m->mutable_extents(4)->set_shard(2); }},
      {"extent 2 [5288, +3072)", [](auto* m) { m->mutable_extents()->SwapElements(2, 3); }},
      {"extents cover 0 of 4 shards", [](auto* m) { m->clear_extents(); }},
      {"names shard 4 of 4",
       [](auto* m) {
         proto::Extent* extra = m->add_extents();
         extra->set_shard(4);
         extra->set_bytes(8);
       }},
      {"no parts", [](auto* m) { m->clear_parts(); }},
      {"kind", [](auto* m) { m->set_kind(proto::STEP_DELTA); }},
      {"extent at offset 4264 of shard 'model-00001-of-00004.safetensors' crosses the end",
       [](auto* m) {
         auto* x = m->mutable_extents();
         (*x)[2].set_bytes((*x)[2].bytes() + (*x)[3].bytes());
         x->DeleteSubrange(3, 1);
       }},
      {"extent at offset 4263 of shard 'model-00001-of-00004.safetensors' crosses the end or "
       "an element",
       [](auto* m) {
         m->mutable_extents(1)->set_bytes(4095);
         proto::Extent* split = m->mutable_extents()->Add();
         split->set_offset(m->extents(1).offset() + 4095);
         split->set_bytes(1);
         for (int k = m->extents_size() - 1; k > 2; --k)
           m->mutable_extents()->SwapElements(k, k - 1);
       }},
  };
  for (const auto& lie : lies) {
    proto::StepManifest m = manifest_;
    lie.apply(&m);
    expect_error(validate_anchor_manifest(m), StatusCode::kDataLoss, {lie.needle});
    Bytes dest(model_.data[0].size());
    EXPECT_EQ(read_anchor_tensor(dir_, m, 0, dest).code(), StatusCode::kDataLoss) << lie.needle;
  }
}

}  // namespace
}  // namespace weightcast
