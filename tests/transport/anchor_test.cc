// Anchors of the filesystem journal as written: write_anchor's files are valid safetensors
// shards with a Hugging Face index, its manifest describes them exactly (extents, checksums,
// shard placement), the readers read every tensor back, the output does not depend on the
// thread count, and the writer surfaces write failures and refuses bad specs before writing.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/formats/safetensors_format.h"
#include "tests/transport/anchor_test_util.h"
#include "transport/fs/anchor_reader.h"
#include "transport/fs/anchor_writer.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using anchor_testing::Bytes;
using anchor_testing::expect_error;
using anchor_testing::mixed_model;
using anchor_testing::Model;
using anchor_testing::read_file;
using anchor_testing::ScratchDir;
using anchor_testing::sharded_model;
using anchor_testing::small_options;

uint64_t checksum_of(const Bytes& bytes, DType dtype) {
  return checksum_range(bytes.data(), dtype_size(dtype), bytes.size() / dtype_size(dtype), 0);
}

// Reads every tensor back through read_anchor and read_anchor_tensor and compares.
void expect_reads_back(const std::string& dir, const proto::StepManifest& manifest, Model& model) {
  std::vector<Bytes> out(model.data.size());
  std::vector<std::span<uint8_t>> dests;
  for (size_t i = 0; i < out.size(); ++i)
    dests.emplace_back((out[i] = Bytes(model.data[i].size())));
  ThreadPool pool(3);
  ASSERT_TRUE(read_anchor(dir, manifest, dests, &pool).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i], model.data[i]) << model.names[i];
    Bytes one(model.data[i].size());
    const Status s = read_anchor_tensor(dir, manifest, i, one);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(one, model.data[i]) << model.names[i];
  }
}

TEST(AnchorRoundTrip, MixedDtypesAndShapesInOneShard) {
  ScratchDir tmp;
  Model model = mixed_model();
  proto::StepManifest manifest;
  ASSERT_TRUE(write_anchor(tmp.sub("a"), model.view(), {}, &manifest).ok());

  EXPECT_EQ(manifest.kind(), proto::STEP_ANCHOR);
  EXPECT_EQ(manifest.index_file(), "model.safetensors.index.json");
  ASSERT_EQ(manifest.parts_size(), 1);
  EXPECT_EQ(manifest.parts(0).file(), "model-00001-of-00001.safetensors");
  const Bytes file = read_file(tmp.sub("a/model-00001-of-00001.safetensors"));
  EXPECT_EQ(manifest.parts(0).bytes(), file.size());
  auto parsed = parse_safetensors(file);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->metadata.at("format"), "pt");
  ASSERT_EQ(manifest.tensors_size(), static_cast<int>(model.names.size()));
  for (size_t i = 0; i < model.names.size(); ++i) {
    const auto& t = manifest.tensors(static_cast<int>(i));
    EXPECT_EQ(t.name(), model.names[i]);  // input order
    EXPECT_EQ(t.dtype(), static_cast<proto::DType>(model.tensors[i].dtype));
    EXPECT_EQ(std::vector<int64_t>(t.shape().begin(), t.shape().end()), model.tensors[i].shape);
    EXPECT_EQ(t.checksum(), checksum_of(model.data[i], model.tensors[i].dtype));
    EXPECT_EQ(Bytes(file.begin() + t.offset(), file.begin() + t.offset() + t.bytes()),
              model.data[i]);
    const TensorBytesView* v = parsed->find(model.names[i]);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(Bytes(v->bytes.begin(), v->bytes.end()), model.data[i]);
    EXPECT_EQ(v->shape, model.tensors[i].shape);
  }
  expect_reads_back(tmp.sub("a"), manifest, model);
  const Status verified = verify_anchor(tmp.sub("a"), manifest);
  EXPECT_TRUE(verified.ok()) << verified.to_string();
}

TEST(AnchorRoundTrip, EmptyModelIsOneHeaderOnlyShard) {
  ScratchDir tmp;
  proto::StepManifest manifest;
  ASSERT_TRUE(write_anchor(tmp.sub("a"), {}, {}, &manifest).ok());
  ASSERT_EQ(manifest.parts_size(), 1);
  ASSERT_EQ(manifest.extents_size(), 1);
  EXPECT_EQ(manifest.extents(0).bytes(), manifest.parts(0).bytes());
  auto parsed = parse_safetensors(read_file(tmp.sub("a/") + manifest.parts(0).file()));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_TRUE(parsed->tensors.empty());
  EXPECT_TRUE(verify_anchor(tmp.sub("a"), manifest).ok());
}

TEST(AnchorShards, SmallShardsAndSlicesCoverFilesExactly) {
  ScratchDir tmp;
  Model model = sharded_model();
  proto::StepManifest manifest;
  const std::string dir = tmp.sub("a");
  ASSERT_TRUE(write_anchor(dir, model.view(), small_options(), &manifest).ok());

  // 5+3 | 40 (alone) | 6+2 | 10+1 KiB.
  ASSERT_EQ(manifest.parts_size(), 4);
  const std::vector<uint32_t> expected_part = {0, 0, 1, 2, 2, 3, 3};
  std::vector<Bytes> files;
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(manifest.parts(s).file(), anchor_shard_name(s, 4));
    files.push_back(read_file(dir + "/" + manifest.parts(s).file()));
    EXPECT_EQ(manifest.parts(s).bytes(), files[s].size());
    EXPECT_EQ(manifest.parts(s).raw_bytes(), files[s].size());
    EXPECT_EQ(manifest.parts(s).xxh3(), 0u);
  }
  EXPECT_EQ(manifest.parts(1).file(), "model-00002-of-00004.safetensors");
  for (int i = 0; i < 7; ++i) {
    const auto& t = manifest.tensors(i);
    EXPECT_EQ(t.part(), expected_part[i]) << t.name();
    auto parsed = parse_safetensors(files[t.part()]);
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    const TensorBytesView* v = parsed->find(t.name());
    ASSERT_NE(v, nullptr) << t.name();
    EXPECT_EQ(Bytes(v->bytes.begin(), v->bytes.end()), model.data[i]);
    EXPECT_EQ(t.checksum(), checksum_of(model.data[i], DType::kBF16));
  }

  // Extents: contiguous from 0 to the file size per shard, at most a slice, XXH3 of the bytes,
  // the first is the header and every later one lies inside a single tensor.
  int e = 0;
  for (int s = 0; s < 4; ++s) {
    uint64_t cursor = 0;
    bool first = true;
    for (; e < manifest.extents_size() && manifest.extents(e).shard() == uint32_t(s); ++e) {
      const auto& x = manifest.extents(e);
      EXPECT_EQ(x.offset(), cursor);
      EXPECT_EQ(x.xxh3(), XXH3_64bits(files[s].data() + x.offset(), x.bytes()));
      if (!first) {
        EXPECT_LE(x.bytes(), 4096u);
        int owners = 0;
        for (const auto& t : manifest.tensors()) {
          owners += t.part() == uint32_t(s) && t.offset() <= x.offset() &&
                    x.offset() + x.bytes() <= t.offset() + t.bytes();
        }
        EXPECT_EQ(owners, 1) << "extent at " << x.offset();
      }
      first = false;
      cursor += x.bytes();
    }
    EXPECT_EQ(cursor, files[s].size()) << "shard " << s;
  }
  EXPECT_EQ(e, manifest.extents_size());
  EXPECT_GE(manifest.extents_size(), 4 + 67 / 4);

  const auto index = nlohmann::json::parse(read_file(dir + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 67u << 10);
  ASSERT_EQ(index["weight_map"].size(), 7u);
  for (const auto& t : manifest.tensors()) {
    EXPECT_EQ(index["weight_map"][t.name()], manifest.parts(t.part()).file());
  }
  expect_reads_back(dir, manifest, model);
  EXPECT_TRUE(verify_anchor(dir, manifest).ok());
}

TEST(AnchorShards, OneTwoAndFourThreadsWriteIdenticalFiles) {
  ScratchDir tmp;
  Model model = sharded_model();
  std::vector<proto::StepManifest> manifests(3);
  const size_t threads[] = {1, 2, 4};
  for (int k = 0; k < 3; ++k) {
    AnchorWriteOptions o = small_options(threads[k]);
    std::vector<uint64_t> seen;
    o.progress = [&](uint64_t done, uint64_t total) {
      EXPECT_LE(done, total);
      seen.push_back(done);
    };
    ASSERT_TRUE(write_anchor(tmp.sub(std::to_string(k)), model.view(), o, &manifests[k]).ok());
    ASSERT_FALSE(seen.empty());
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
    uint64_t total = 0;
    for (const auto& p : manifests[k].parts()) total += p.bytes();
    EXPECT_EQ(seen.back(), total);
  }
  ThreadPool shared(3);
  AnchorWriteOptions on_pool = small_options();
  on_pool.pool = &shared;
  proto::StepManifest pooled;
  ASSERT_TRUE(write_anchor(tmp.sub("pooled"), model.view(), on_pool, &pooled).ok());
  EXPECT_EQ(pooled.SerializeAsString(), manifests[0].SerializeAsString());
  for (int k = 1; k < 3; ++k) {
    EXPECT_EQ(manifests[k].SerializeAsString(), manifests[0].SerializeAsString());
  }
  for (const auto& part : manifests[0].parts()) {
    const Bytes reference = read_file(tmp.sub("0/" + part.file()));
    EXPECT_EQ(read_file(tmp.sub("1/" + part.file())), reference) << part.file();
    EXPECT_EQ(read_file(tmp.sub("2/" + part.file())), reference) << part.file();
    EXPECT_EQ(read_file(tmp.sub("pooled/" + part.file())), reference) << part.file();
  }
  EXPECT_EQ(read_file(tmp.sub("2/model.safetensors.index.json")),
            read_file(tmp.sub("0/model.safetensors.index.json")));
}

TEST(AnchorWriter, InjectedWriteFailureSurfaces) {
  ScratchDir tmp;
  Model model = sharded_model();
  AnchorWriteOptions o = small_options();
  const std::string victim = anchor_shard_name(1, 4);
  o.before_write = [&](const std::string& file, uint64_t offset, uint64_t) -> Status {
    if (file.ends_with(victim) && offset > 8192) {
      return io_error("injected ENOSPC writing '" + file + "' at offset " + std::to_string(offset));
    }
    return ok_status();
  };
  proto::StepManifest manifest;
  expect_error(write_anchor(tmp.sub("a"), model.view(), o, &manifest), StatusCode::kIoError,
               {"injected ENOSPC", victim});
}

TEST(AnchorWriter, BadSpecsAreRejectedBeforeWriting) {
  ScratchDir tmp;
  proto::StepManifest manifest;
  Model dup = sharded_model();
  dup.tensors[5].name = "w1";  // a duplicate in another shard
  expect_error(write_anchor(tmp.sub("dup"), dup.view(), small_options(), &manifest),
               StatusCode::kInvalidArgument, {"w1"});
  Model short_bytes = mixed_model();
  auto view = short_bytes.view();
  std::vector<AnchorTensor> tensors(view.begin(), view.end());
  tensors[0].bytes = tensors[0].bytes.first(10);
  expect_error(write_anchor(tmp.sub("short"), tensors, {}, &manifest), StatusCode::kInvalidArgument,
               {"model.embed_tokens.weight", "10 bytes"});
  EXPECT_FALSE(fs::exists(tmp.sub("dup")));
  EXPECT_FALSE(fs::exists(tmp.sub("short")));
}

}  // namespace
}  // namespace weightcast
