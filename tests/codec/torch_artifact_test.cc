#include "codec/formats/torch_artifact.h"
#include "tests/test_bytes.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec/formats/zip_archive.h"

namespace weightcast {
namespace {

using testing::Bytes;
using testing::bytes_of;
using testing::from_hex;
using testing::sink_into;

template <typename T>
Bytes raw(std::initializer_list<T> values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

// Storages and views exercising aliases, offsets, strides, scalars, empty views and fp8.
struct Fixture {
  Bytes f32 = raw<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Bytes bf16 = raw<uint16_t>({0x3f80, 0x4000, 0xc040});
  Bytes f8 = Bytes(16, 0x38);
  Bytes i64 = raw<int64_t>({-1, int64_t{1} << 40});
  std::vector<TorchStorage> storages = {{"0", DType::kF32, f32},
                                        {"1", DType::kBF16, bf16},
                                        {"2", DType::kF8E4M3FN, f8},
                                        {"3", DType::kI64, i64}};
  std::vector<TorchTensorRef> tensors = {
      {"w", 0, 0, {3, 4}, {4, 1}},        {"w.t", 0, 0, {4, 3}, {1, 4}},
      {"w.row1", 0, 4, {4}, {1}},         {"w.col2", 0, 2, {3}, {4}},
      {"bias", 1, 0, {3}, {1}},           {"bias.last", 1, 2, {}, {}},
      {"none", 1, 3, {0}, {1}},           {"fp8", 2, 0, {4, 4}, {4, 1}},
      {"fp8.tail", 2, 8, {2, 4}, {4, 1}}, {"count", 3, 1, {}, {}},
  };
};

Bytes write(const Fixture& f, TorchWriteOptions options = {}) {
  Bytes out;
  Status s = write_torch_artifact("adapter_model", f.storages, f.tensors, sink_into(&out), options);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

// An artifact assembled by hand, for files our writer would refuse to produce.
Bytes make_zip(const std::vector<std::pair<std::string, Bytes>>& records) {
  Bytes out;
  ZipWriter w(sink_into(&out));
  for (const auto& [name, data] : records) EXPECT_TRUE(w.add_stored(name, data).ok()) << name;
  EXPECT_TRUE(w.finish().ok());
  return out;
}

Bytes pickle_of(std::vector<PickledTensor> tensors) {
  auto p = write_torch_pickle(tensors);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : Bytes{};
}

void expect_error(const Bytes& file, StatusCode code, std::string_view fragment) {
  auto r = parse_torch_artifact(file);
  ASSERT_FALSE(r.ok()) << "parsed although it should fail with: " << fragment;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().to_string();
}

void expect_round_trip(const Fixture& f, const Bytes& file) {
  auto r = parse_torch_artifact(file);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->archive_name, "adapter_model");
  EXPECT_EQ(r->version, 3u);
  ASSERT_EQ(r->storages.size(), f.storages.size());
  for (size_t i = 0; i < f.storages.size(); ++i) {
    EXPECT_EQ(r->storages[i].key, f.storages[i].key);
    EXPECT_EQ(r->storages[i].dtype, f.storages[i].dtype);
    EXPECT_TRUE(std::ranges::equal(r->storages[i].bytes, f.storages[i].bytes));
    EXPECT_GE(r->storages[i].bytes.data(), file.data());  // a view into the file
    EXPECT_LE(r->storages[i].bytes.data() + r->storages[i].bytes.size(), file.data() + file.size());
  }
  ASSERT_EQ(r->tensors.size(), f.tensors.size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const TorchTensorRef& a = r->tensors[i];
    const TorchTensorRef& b = f.tensors[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.storage, b.storage) << a.name;
    EXPECT_EQ(a.storage_offset, b.storage_offset) << a.name;
    EXPECT_EQ(a.shape, b.shape) << a.name;
    EXPECT_EQ(a.stride, b.stride) << a.name;
  }
}

TEST(TorchArtifact, RoundTripsAliasesOffsetsAndStrides) {
  const Fixture f;
  expect_round_trip(f, write(f));
}

TEST(TorchArtifact, ForcedZip64RoundTrips) {
  const Fixture f;
  TorchWriteOptions o;
  o.force_zip64 = true;
  const Bytes file = write(f, o);
  EXPECT_TRUE(parse_zip(file)->zip64);
  expect_round_trip(f, file);
}

TEST(TorchArtifact, RecordsInTorchOrderAnd64ByteAligned) {
  const Fixture f;
  const Bytes file = write(f);
  EXPECT_EQ(Bytes(file.begin(), file.begin() + 4), (Bytes{'P', 'K', 3, 4}));  // _is_zipfile
  auto zip = parse_zip(file);
  ASSERT_TRUE(zip.ok());
  std::vector<std::string> names;
  for (const ZipEntry& e : zip->entries) {
    names.push_back(e.name);
    EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"adapter_model/data.pkl", "adapter_model/byteorder",
                                             "adapter_model/data/0", "adapter_model/data/1",
                                             "adapter_model/data/2", "adapter_model/data/3",
                                             "adapter_model/version"}));
  EXPECT_TRUE(std::ranges::equal(zip->entries[1].data, bytes_of("little")));
  EXPECT_TRUE(std::ranges::equal(zip->entries[6].data, bytes_of("3\n")));
}

// torch 1.13's `torch.save({'a': t, 'b': t[1:], 'c': other}, 'g.pt')` with
// t = tensor([[1., 2.], [3., 4.]]), other = tensor([1.5, -2.0], dtype=bfloat16): data
// descriptors, zeroed local sizes, an always-present ZIP64 end record, memo references.
constexpr std::string_view kPythonGolden =
    "504b0304000008080000000000000000000000000000000000000a001800672f646174612e706b6c464214005a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a80027d710028580100000061710163746f7263682e5f7574696c730a"
    "5f72656275696c645f74656e736f725f76320a71022828580700000073746f72616765710363746f7263680a466c"
    "6f617453746f726167650a71045801000000307105580300000063707571064b04747107514b004b024b02867108"
    "4b024b018671098963636f6c6c656374696f6e730a4f726465726564446963740a710a2952710b74710c52710d58"
    "0100000062710e6802282868036804680568064b0474710f514b024b014b028671104b024b0186711189680a2952"
    "7112747113527114580100000063711568022828680363746f7263680a42466c6f6174313653746f726167650a71"
    "16580100000031711768064b02747118514b004b028571194b0185711a89680a2952711b74711c52711d752e504b"
    "0708f7a47ecc2e0100002e010000504b03040000080800000000000000000000000000000000000008001c00672f"
    "646174612f30464218005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0000803f0000004000004040"
    "00008040504b07085414a78b1000000010000000504b030400000808000000000000000000000000000000000000"
    "08003a00672f646174612f31464236005a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
    "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5ac03f00c0504b070807515ae30400000004000000504b"
    "03040000080800000000000000000000000000000000000009000500672f76657273696f6e464201005a330a504b"
    "0708d19e67550200000002000000504b0102000000000808000000000000f7a47ecc2e0100002e0100000a000000"
    "0000000000000000000000000000672f646174612e706b6c504b01020000000008080000000000005414a78b1000"
    "00001000000008000000000000000000000000007e010000672f646174612f30504b010200000000080800000000"
    "000007515ae304000000040000000800000000000000000000000000e0010000672f646174612f31504b01020000"
    "00000808000000000000d19e67550200000002000000090000000000000000000000000054020000672f76657273"
    "696f6e504b06062c000000000000001e032d00000000000000000004000000000000000400000000000000db0000"
    "00000000009202000000000000504b0607000000006d0300000000000001000000504b05060000000004000400db"
    "000000920200000000";

TEST(TorchArtifact, ReadsPythonTorchSaveWithSharedStorage) {
  const Bytes file = from_hex(kPythonGolden);
  auto r = parse_torch_artifact(file);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->archive_name, "g");
  ASSERT_EQ(r->storages.size(), 2u);
  EXPECT_EQ(r->storages[0].dtype, DType::kF32);
  EXPECT_TRUE(std::ranges::equal(r->storages[0].bytes, raw<float>({1, 2, 3, 4})));
  EXPECT_EQ(r->storages[1].dtype, DType::kBF16);
  EXPECT_TRUE(std::ranges::equal(r->storages[1].bytes, raw<uint16_t>({0x3fc0, 0xc000})));
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(r->tensors[0].name, "a");
  EXPECT_EQ(r->tensors[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r->tensors[1].name, "b");
  EXPECT_EQ(r->tensors[1].storage, 0u);  // shares a's storage
  EXPECT_EQ(r->tensors[1].storage_offset, 2);
  EXPECT_EQ(r->tensors[1].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r->tensors[1].stride, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r->tensors[2].name, "c");
  EXPECT_EQ(r->tensors[2].storage, 1u);
}

TEST(TorchArtifact, AcceptsTorch2Records) {
  // torch 2.x adds .format_version, .storage_alignment and .data/serialization_id records;
  // TorchScript-style archives keep the version in .data/version.
  const Bytes file = make_zip(
      {{"archive/data.pkl", pickle_of({{"t", "0", DType::kF32, 4, 0, {4}, {1}}})},
       {"archive/.format_version", bytes_of("1")},
       {"archive/.storage_alignment", bytes_of("64")},
       {"archive/byteorder", bytes_of("little")},
       {"archive/data/0", raw<float>({1, 2, 3, 4})},
       {"archive/.data/version", bytes_of("3\n")},
       {"archive/.data/serialization_id", bytes_of("1234567890123456789012345678901234567890")}});
  auto r = parse_torch_artifact(file);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->archive_name, "archive");
  EXPECT_EQ(r->version, 3u);
  ASSERT_EQ(r->tensors.size(), 1u);
}

TEST(TorchArtifact, DeferredCrcLeavesChecksToTheCaller) {
  const Fixture f;
  Bytes file = write(f);
  auto zip = parse_zip(file);
  ASSERT_TRUE(zip.ok());
  file[zip->find("adapter_model/data/1")->data_offset] ^= 1;
  expect_error(file, StatusCode::kDataLoss, "'adapter_model/data/1': CRC32 mismatch");
  TorchReadOptions o;
  o.zip.verify_crc = false;
  EXPECT_TRUE(parse_torch_artifact(file, o).ok());
}

TEST(TorchArtifact, ViewBounds) {
  const auto check = [](TorchTensorRef v, uint64_t numel) {
    return check_view_in_storage(v, numel, "t").ok();
  };
  EXPECT_TRUE(check({"t", 0, 0, {3, 4}, {4, 1}}, 12));
  EXPECT_FALSE(check({"t", 0, 1, {3, 4}, {4, 1}}, 12));
  EXPECT_TRUE(check({"t", 0, 11, {}, {}}, 12));
  EXPECT_FALSE(check({"t", 0, 12, {}, {}}, 12));
  EXPECT_TRUE(check({"t", 0, 12, {0, 5}, {5, 1}}, 12));  // empty view at the end
  EXPECT_FALSE(check({"t", 0, 13, {0}, {1}}, 12));
  EXPECT_TRUE(check({"t", 0, 0, {5, 3}, {0, 1}}, 3));  // broadcast (stride 0)
  EXPECT_FALSE(check({"t", 0, 0, {3}, {-1}}, 12));
  EXPECT_FALSE(check({"t", 0, -1, {1}, {1}}, 12));
  EXPECT_FALSE(check({"t", 0, 0, {2}, {}}, 12));
  EXPECT_FALSE(check({"t", 0, 0, {3, 3}, {int64_t{1} << 62, int64_t{1} << 62}}, 12));
}

TEST(TorchArtifact, WriterValidatesBeforeEmittingAnything) {
  const auto refuse = [](std::string_view archive, std::vector<TorchStorage> storages,
                         std::vector<TorchTensorRef> tensors, std::string_view fragment) {
    Bytes out;
    Status s = write_torch_artifact(archive, storages, tensors, sink_into(&out));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.to_string();
    EXPECT_TRUE(out.empty());
  };
  const Bytes four = raw<float>({1, 2, 3, 4});
  const std::vector<TorchStorage> one = {{"0", DType::kF32, four}};
  const std::vector<TorchTensorRef> whole = {{"t", 0, 0, {4}, {1}}};
  refuse("a/b", one, whole, "single safe path component");
  refuse("..", one, whole, "single safe path component");
  refuse("", one, whole, "single safe path component");
  refuse("m", {{"0", DType::kF32, four}, {"0", DType::kF32, four}}, whole, "duplicate or not made");
  refuse("m", {{"../0", DType::kF32, four}}, whole, "duplicate or not made");
  refuse("m", {{"0", DType::kF32, std::span(four).first(6)}}, whole, "not a whole number of f32");
  refuse("m", one, {{"t", 1, 0, {4}, {1}}}, "refers to storage #1 of 1");
  refuse("m", one, {{"t", 0, 1, {4}, {1}}}, "reaches outside");
  refuse("m", {{"0", DType::kF32, four}, {"1", DType::kF32, four}}, whole, "'1' is not used");
  refuse("m", one, {{"t", 0, 0, {4}, {1}}, {"t", 0, 0, {4}, {1}}}, "appears twice");
}

// ---- malformed artifacts: one test per case ----

TEST(TorchArtifactMalformed, StorageKeyMissingFromZip) {
  const Fixture f;
  Bytes file = write(f);
  // Rename the record data/1 to data/9 in both headers (same length, CRC unaffected).
  const std::string from = "adapter_model/data/1", to = "adapter_model/data/9";
  for (auto it = file.begin();
       (it = std::search(it, file.end(), from.begin(), from.end())) != file.end();) {
    it = std::copy(to.begin(), to.end(), it);
  }
  expect_error(file, StatusCode::kDataLoss,
               "tensor 'bias': storage '1' has no record 'adapter_model/data/1'");
}

TEST(TorchArtifactMalformed, StorageSizeMismatch) {
  const Bytes file = make_zip({{"m/data.pkl", pickle_of({{"t", "0", DType::kF32, 5, 0, {4}, {1}}})},
                               {"m/data/0", raw<float>({1, 2, 3, 4})},
                               {"m/version", bytes_of("3\n")}});
  expect_error(file, StatusCode::kDataLoss,
               "record 'm/data/0' has 16 bytes but the storage size is 5 x f32 = 20");
}

TEST(TorchArtifactMalformed, ViewOutOfStorageBounds) {
  const Bytes file =
      make_zip({{"m/data.pkl", pickle_of({{"t", "0", DType::kF32, 4, 1, {2, 2}, {2, 1}}})},
                {"m/data/0", raw<float>({1, 2, 3, 4})},
                {"m/version", bytes_of("3\n")}});
  expect_error(file, StatusCode::kDataLoss,
               "tensor 't': view (offset 1, last element 4) reaches outside of a storage of 4");
}

TEST(TorchArtifactMalformed, MissingVersionRecord) {
  const Bytes file = make_zip({{"m/data.pkl", pickle_of({})}});
  expect_error(file, StatusCode::kDataLoss, "no 'm/version' record");
}

TEST(TorchArtifactMalformed, VersionNotANumber) {
  const Bytes file = make_zip({{"m/data.pkl", pickle_of({})}, {"m/version", bytes_of("3a\n")}});
  expect_error(file, StatusCode::kDataLoss, "'m/version' does not hold a version number");
}

TEST(TorchArtifactMalformed, MissingDataPkl) {
  expect_error(make_zip({{"m/version", bytes_of("3\n")}}), StatusCode::kDataLoss,
               "no 'm/data.pkl' record");
}

TEST(TorchArtifactMalformed, RecordOutsideArchiveFolder) {
  const Bytes file = make_zip(
      {{"m/data.pkl", pickle_of({})}, {"m/version", bytes_of("3\n")}, {"other/x", bytes_of("x")}});
  expect_error(file, StatusCode::kDataLoss, "record 'other/x' is outside the archive folder 'm'");
}

TEST(TorchArtifactMalformed, FirstRecordNotInAFolder) {
  expect_error(make_zip({{"data.pkl", pickle_of({})}}), StatusCode::kDataLoss,
               "record 'data.pkl' is not inside an archive folder");
}

TEST(TorchArtifactMalformed, EmptyZip) {
  expect_error(make_zip({}), StatusCode::kDataLoss, "the zip has no records");
}

TEST(TorchArtifactMalformed, BigEndianByteOrder) {
  const Bytes file = make_zip({{"m/data.pkl", pickle_of({})},
                               {"m/byteorder", bytes_of("big")},
                               {"m/version", bytes_of("3\n")}});
  expect_error(file, StatusCode::kUnimplemented, "byte order 'big' is not supported");
}

TEST(TorchArtifactMalformed, ForbiddenGlobalInPickle) {
  const std::string evil =
      "\x80\x02"
      "cos\nsystem\n.";
  const Bytes file = make_zip({{"m/data.pkl", bytes_of(evil)}, {"m/version", bytes_of("3\n")}});
  expect_error(file, StatusCode::kDataLoss,
               "torch artifact 'm/data.pkl': torch pickle: forbidden global 'os.system'");
}

TEST(TorchArtifactMalformed, UnsafeStorageKey) {
  const Bytes file = make_zip({{"m/data.pkl", pickle_of({{"t", "../0", DType::kU8, 1, 0, {}, {}}})},
                               {"m/version", bytes_of("3\n")}});
  expect_error(file, StatusCode::kDataLoss, "storage key '../0' is not a safe record name");
}

TEST(TorchArtifactMalformed, TruncatedFile) {
  const Fixture f;
  Bytes file = write(f);
  file.erase(file.end() - 30, file.end());
  expect_error(file, StatusCode::kDataLoss, "no end of central directory record");
}

}  // namespace
}  // namespace weightcast
