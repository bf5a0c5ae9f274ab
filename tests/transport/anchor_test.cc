// Anchors of the filesystem journal: write_anchor's files are valid safetensors shards with a
// Hugging Face index, its manifest describes them exactly, and the readers refuse every kind
// of damage (flipped byte, truncation, missing shard, a lying manifest) naming the culprit.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/safetensors_format.h"
#include "codec/thread_pool.h"
#include "transport/file_io.h"
#include "transport/fs/anchor_reader.h"
#include "transport/fs/anchor_writer.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// A fresh directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::path(::testing::TempDir()) / "anchor_test.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  std::string sub(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

struct Model {
  std::vector<std::string> names;
  std::vector<Bytes> data;
  std::vector<AnchorTensor> tensors;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape) {
    uint64_t numel = 1;
    for (const int64_t d : shape) numel *= static_cast<uint64_t>(d);
    Bytes bytes(numel * dtype_size(dtype));
    uint64_t x = 0x9E3779B97F4A7C15ull * (data.size() + 1);
    for (auto& b : bytes) b = static_cast<uint8_t>((x = x * 6364136223846793005ull + 1) >> 56);
    names.push_back(name);
    data.push_back(std::move(bytes));
    tensors.push_back({name, dtype, std::move(shape), {}});
  }
  std::span<const AnchorTensor> view() {
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = data[i];
    return tensors;
  }
};

Model mixed_model() {
  Model m;
  m.add("model.embed_tokens.weight", DType::kBF16, {33, 40});
  m.add("model.norm.scale", DType::kF32, {});
  m.add("model.empty", DType::kI64, {0, 4});
  m.add("model.layers.0.mask", DType::kBool, {13});
  m.add("model.layers.0.q.weight", DType::kF8E4M3FN, {17, 9});
  m.add("model.layers.0.counts", DType::kI32, {3, 7});
  m.add("lm_head.weight", DType::kF64, {5, 3});
  m.add("model.layers.0.bytes", DType::kU8, {11});
  return m;
}

// Tensor bytes 5, 3, 40, 6, 2, 10, 1 KiB: with 16 KiB shards and 4 KiB slices the 40 KiB tensor
// gets a file of its own and most tensors span several slices.
Model sharded_model() {
  Model m;
  const int kib[] = {5, 3, 40, 6, 2, 10, 1};
  for (int i = 0; i < 7; ++i) m.add("w" + std::to_string(i), DType::kBF16, {kib[i], 512});
  return m;
}

AnchorWriteOptions small_options(size_t threads = 4) {
  AnchorWriteOptions o;
  o.shard_bytes = 16 << 10;
  o.slice_bytes = 4 << 10;
  o.threads = threads;
  return o;
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void expect_error(const Status& s, StatusCode code, const std::vector<std::string>& needles) {
  ASSERT_EQ(s.code(), code) << s.to_string();
  for (const auto& n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message() << "\nlacks: " << n;
  }
}

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
