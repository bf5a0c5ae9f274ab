#include "codec/formats/safetensors_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "codec/base/byte_io.h"

namespace weightcast {
namespace {

using Bytes = std::vector<uint8_t>;

// A file as any writer could lay it out: length prefix, the JSON exactly as given (no padding
// added), then `data_bytes` bytes counting up from 1.
Bytes file_from_json(const std::string& json, size_t data_bytes) {
  Bytes out;
  append_le<uint64_t>(&out, json.size());
  out.insert(out.end(), json.begin(), json.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i + 1));
  return out;
}

std::string header_json(const Bytes& file) {
  return std::string(file.begin() + 8, file.begin() + 8 + load_le<uint64_t>(file.data()));
}

// Writes `views` with `metadata` through plan + write into one buffer.
Bytes write_file(const std::vector<TensorBytesView>& views,
                 const std::map<std::string, std::string>& metadata = {}) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& v : views) specs.push_back({v.name, v.dtype, v.shape});
  auto layout = plan_safetensors(specs, metadata);
  EXPECT_TRUE(layout.ok()) << layout.status().to_string();
  if (!layout.ok()) return {};
  Bytes out;
  const Status s = write_safetensors(*layout, views, [&](std::span<const uint8_t> piece) {
    out.insert(out.end(), piece.begin(), piece.end());
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(out.size(), layout->file_size);
  return out;
}

// One parse that must fail with `code` and a message containing `needle`.
void expect_rejected(const Bytes& file, const std::string& needle,
                     StatusCode code = StatusCode::kDataLoss,
                     const SafetensorsLimits& limits = {}) {
  auto r = parse_safetensors(file, limits);
  ASSERT_FALSE(r.ok()) << "accepted: " << needle;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << needle;
}

// ---- Round trip and the reference's exact bytes ----

TEST(SafetensorsFormat, RoundTripsEveryDtypeScalarsZeroSizeAndMetadata) {
  std::vector<Bytes> storage;
  std::vector<TensorBytesView> views;
  auto add = [&](std::string name, DType dtype, std::vector<int64_t> shape) {
    const uint64_t numel = *shape_numel(shape, name);
    Bytes b(numel * dtype_size(dtype));
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 37 + name.size());
    storage.push_back(std::move(b));
    views.push_back({std::move(name), dtype, std::move(shape), {}});
  };
  add("w.f32", DType::kF32, {2, 3});
  add("w.bf16", DType::kBF16, {1, 3});
  add("w.e4m3", DType::kF8E4M3FN, {3, 2});
  add("w.e5m2", DType::kF8E5M2, {5});
  add("w.f16", DType::kF16, {1, 1, 1});
  add("scalar", DType::kF64, {});
  add("empty", DType::kI32, {0, 7});
  add("also_empty", DType::kBF16, {4, 0});
  add("flags", DType::kBool, {3});
  add("ids", DType::kI64, {2});
  add("u8", DType::kU8, {1});
  add("i8", DType::kI8, {2});
  add("i16", DType::kI16, {2});
  add("naïve \"name\"\n\x01/", DType::kF32, {1});
  for (size_t i = 0; i < views.size(); ++i) views[i].bytes = storage[i];
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünï \"q\"\t"}};

  const Bytes file = write_file(views, metadata);
  auto parsed = parse_safetensors(file);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->data_offset % 8, 0u);
  EXPECT_EQ(parsed->metadata, metadata);
  ASSERT_EQ(parsed->tensors.size(), views.size());
  for (const auto& v : views) {
    const TensorBytesView* got = parsed->find(v.name);
    ASSERT_NE(got, nullptr) << v.name;
    EXPECT_EQ(got->dtype, v.dtype) << v.name;
    EXPECT_EQ(got->shape, v.shape) << v.name;
    EXPECT_TRUE(std::equal(got->bytes.begin(), got->bytes.end(), v.bytes.begin(), v.bytes.end()))
        << v.name;
  }
  EXPECT_EQ(parsed->find("missing"), nullptr);
  // Writing what was read gives the same bytes again.
  EXPECT_EQ(write_file(parsed->tensors, parsed->metadata), file);
}

TEST(SafetensorsFormat, DataOrderIsReferenceDtypeRankThenName) {
  const Bytes zeros(64, 0);
  std::vector<TensorBytesView> views;
  for (const auto& [name, dtype] :
       std::vector<std::pair<std::string, DType>>{{"a", DType::kBF16},
                                                  {"b", DType::kF32},
                                                  {"c", DType::kF8E5M2},
                                                  {"d", DType::kF8E4M3FN},
                                                  {"e", DType::kF64},
                                                  {"f", DType::kI64},
                                                  {"g", DType::kF16},
                                                  {"h", DType::kI16},
                                                  {"B", DType::kF32},
                                                  {"i", DType::kBool},
                                                  {"j", DType::kU8},
                                                  {"k", DType::kI8},
                                                  {"l", DType::kI32}}) {
    views.push_back({name, dtype, {1}, std::span(zeros).first(dtype_size(dtype))});
  }
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& v : views) specs.push_back({v.name, v.dtype, v.shape});
  auto layout = plan_safetensors(specs, {});
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  std::string order;
  for (const auto& t : layout->tensors) order += t.name;
  // I64 > F64 > F32 > I32 > BF16 > F16 > I16 > F8_E4M3 > F8_E5M2 > I8 > U8 > BOOL, then by name
  // bytewise ('B' < 'b').
  EXPECT_EQ(order, "feBblaghdckji");
  uint64_t at = 0;
  for (const auto& t : layout->tensors) {
    EXPECT_EQ(t.data_begin, at);
    at = t.data_end;
  }
  EXPECT_EQ(layout->file_size, layout->data_offset + at);
}

// The reference crate's own serialization tests (safetensors/src/tensor.rs): same bytes.
TEST(SafetensorsFormat, WriterMatchesReferenceBytes) {
  Bytes f32_data;
  for (float v : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) append_le<float>(&f32_data, v);
  {
    const Bytes file = write_file({{"attn.0", DType::kF32, {1, 2, 3}, f32_data}});
    const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    Bytes expected;
    append_le<uint64_t>(&expected, 64);
    expected.insert(expected.end(), json.begin(), json.end());
    expected.insert(expected.end(), f32_data.begin(), f32_data.end());
    EXPECT_EQ(file, expected);
  }
  {  // misaligned JSON: 7 spaces so the data starts at a multiple of 8
    const Bytes file = write_file({{"attn0", DType::kF32, {1, 1, 2, 3}, f32_data}});
    EXPECT_EQ(load_le<uint64_t>(file.data()), 72u);
    EXPECT_EQ(header_json(file),
              R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       )");
  }
  {
    const Bytes file = write_file({});
    EXPECT_EQ(file, (Bytes{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '}));
  }
  {
    const Bytes file = write_file({}, {{"framework", "pt"}});
    EXPECT_EQ(load_le<uint64_t>(file.data()), 40u);
    EXPECT_EQ(header_json(file), R"({"__metadata__":{"framework":"pt"}}     )");
  }
  {  // {"a": F32 [2], "b": BF16 [1, 3]}: F32 sorts first
    const Bytes data(14, 7);
    const Bytes file = write_file({{"b", DType::kBF16, {1, 3}, std::span(data).first(6)},
                                   {"a", DType::kF32, {2}, std::span(data).first(8)}});
    EXPECT_EQ(header_json(file), R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]}} )");
    EXPECT_EQ(file.size(), 8u + 112u + 14u);
  }
}

TEST(SafetensorsFormat, WriterEscapesStringsLikeSerdeJson) {
  const Bytes data(4, 0);
  const Bytes file = write_file({{"a\"b\\c\n\x01\x7f/é", DType::kF32, {1}, data}});
  EXPECT_NE(header_json(file).find(R"("a\"b\\c\n\u0001)"
                                   "\x7f"
                                   R"(/é":)"),
            std::string::npos)
      << header_json(file);
}

TEST(SafetensorsFormat, ReadsReferenceStyleFiles) {
  // The reference's documentation example: unpadded header, data right after it.
  // (Views point into the parsed buffer, so each buffer outlives its parse result.)
  const Bytes doc_file =
      file_from_json(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})", 16);
  auto doc = parse_safetensors(doc_file);
  ASSERT_TRUE(doc.ok()) << doc.status().to_string();
  EXPECT_EQ(doc->data_offset, 68u);
  ASSERT_NE(doc->find("test"), nullptr);
  EXPECT_EQ(doc->find("test")->bytes.size(), 16u);
  EXPECT_EQ(doc->find("test")->bytes[0], 1);

  // Header order differs from data order; __metadata__ last; an unknown field (ignored, as
  // the reference ignores it); whitespace; zero-size tensors sharing an offset.
  const std::string json = R"( { "b": {"shape": [2], "dtype": "F32", "data_offsets": [4, 12],
      "extra": [1, {"x": null, "y": [true]}]}, "a": {"dtype": "F8_E5M2", "shape": [2, 2],
      "data_offsets": [0, 4]}, "z": {"dtype":"BF16","shape":[0],"data_offsets":[4,4]},
      "z2": {"dtype":"BF16","shape":[3,0],"data_offsets":[12,12]},
      "__metadata__": {"k": "v"} } )";
  const Bytes file = file_from_json(json, 12);
  auto r = parse_safetensors(file);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tensors.size(), 4u);
  EXPECT_EQ(r->tensors[0].name, "b");  // header order
  EXPECT_EQ(r->tensors[1].name, "a");
  EXPECT_EQ(r->find("a")->dtype, DType::kF8E5M2);
  EXPECT_EQ(r->find("b")->bytes.data(), r->find("a")->bytes.data() + 4);
  EXPECT_EQ(r->find("z2")->bytes.size(), 0u);
  EXPECT_EQ(r->metadata, (std::map<std::string, std::string>{{"k", "v"}}));

  // "__metadata__": null is serde's None.
  const Bytes null_file = file_from_json(R"({"__metadata__":null})", 0);
  auto null_meta = parse_safetensors(null_file);
  ASSERT_TRUE(null_meta.ok()) << null_meta.status().to_string();
  EXPECT_TRUE(null_meta->metadata.empty());
}

TEST(SafetensorsFormat, HeaderOnlyParsingForStreamingReaders) {
  const Bytes data(8, 1);
  const Bytes file = write_file({{"x", DType::kF32, {2}, data}});
  auto n = read_safetensors_header_length(std::span(file).first(8), file.size());
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  auto h = parse_safetensors_header(std::span(file).first(8 + *n), file.size());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->data_offset, 8 + *n);
  ASSERT_NE(h->find("x"), nullptr);
  EXPECT_EQ(h->find("x")->data_end, 8u);
  // The declared file size is checked against the offsets even without the data in memory.
  auto short_file = parse_safetensors_header(std::span(file).first(8 + *n), file.size() - 1);
  ASSERT_FALSE(short_file.ok());
  EXPECT_EQ(short_file.status().code(), StatusCode::kDataLoss);
  // Too short a prefix is the caller's mistake, not the file's.
  auto short_prefix = parse_safetensors_header(std::span(file).first(12), file.size());
  ASSERT_FALSE(short_prefix.ok());
  EXPECT_EQ(short_prefix.status().code(), StatusCode::kInvalidArgument);
}

// ---- Writer refusals ----

TEST(SafetensorsFormat, PlanRejectsBadSpecs) {
  auto expect_bad = [](std::vector<SafetensorsTensorSpec> specs, const std::string& needle,
                       const std::map<std::string, std::string>& metadata = {}) {
    auto r = plan_safetensors(std::move(specs), metadata);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect_bad({{"a", DType::kF32, {1}}, {"a", DType::kBF16, {1}}}, "two tensors are named 'a'");
  expect_bad({{"", DType::kF32, {1}}}, "empty name");
  expect_bad({{"__metadata__", DType::kF32, {1}}}, "reserved");
  expect_bad({{"neg", DType::kF32, {2, -1}}}, "tensor 'neg': negative size -1 in dim 1");
  expect_bad({{"big", DType::kF64, {1 << 30, 1 << 30, 1 << 2}}}, "'big'");
  expect_bad({{"bad\xff\x01", DType::kF32, {1}}}, "'bad\\xff\\x01' is not valid UTF-8 at byte 3");
  expect_bad({}, "metadata value of 'k'", {{"k", "\xc0\xaf"}});
  expect_bad({{"deep", DType::kF32, std::vector<int64_t>(65, 1)}}, "65 dimensions");
}

TEST(SafetensorsFormat, WriteChecksViewsAndPassesSinkErrorsThrough) {
  const Bytes data(8, 0);
  auto layout = plan_safetensors({{"a", DType::kF32, {2}}, {"b", DType::kU8, {1}}}, {});
  ASSERT_TRUE(layout.ok());
  size_t calls = 0;
  const ByteSink counting = [&](std::span<const uint8_t>) {
    ++calls;
    return ok_status();
  };
  const TensorBytesView a{"a", DType::kF32, {2}, data};
  const TensorBytesView b{"b", DType::kU8, {1}, std::span(data).first(1)};
  const TensorBytesView b_long{"b", DType::kU8, {1}, data};
  const TensorBytesView c{"c", DType::kU8, {1}, std::span(data).first(1)};
  for (const auto& [views, needle] :
       std::vector<std::pair<std::vector<TensorBytesView>, std::string>>{
           {{a}, "no bytes given for tensor 'b'"},
           {{a, b_long}, "tensor 'b' was planned as U8 [1] of 1 bytes but the view is U8 [1] of 8"},
           {{a, b, c}, "tensor 'c' is not in the layout"},
           {{a, b, b}, "two views for tensor 'b'"}}) {
    const Status s = write_safetensors(*layout, views, counting);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  }
  EXPECT_EQ(calls, 0u);  // a refused write writes nothing
  const Status failing = write_safetensors(
      *layout, std::vector<TensorBytesView>{b, a},
      [](std::span<const uint8_t>) { return io_error("disk full at offset 42"); });
  EXPECT_EQ(failing.code(), StatusCode::kIoError);
  EXPECT_EQ(failing.message(), "disk full at offset 42");
}

// ---- Malformed files: one test per case ----

const char* const kGoodEntry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

TEST(SafetensorsMalformed, TruncatedBelowEightBytes) {
  expect_rejected(Bytes{1, 0, 0, 0, 0}, "file of 5 bytes is shorter than its 8-byte header length");
  expect_rejected(Bytes{}, "file of 0 bytes");
}

TEST(SafetensorsMalformed, HeaderLengthLargerThanFile) {
  Bytes file = file_from_json("{}", 0);
  store_le<uint64_t>(file.data(), 3);
  expect_rejected(file, "header length 3 is larger than the 2 bytes after the length field");
  SafetensorsLimits unlimited;
  unlimited.max_header_bytes = ~uint64_t{0};
  store_le<uint64_t>(file.data(), ~uint64_t{0} - 4);  // 8 + length must not wrap around
  expect_rejected(file, "is larger than the 2 bytes", StatusCode::kDataLoss, unlimited);
}

TEST(SafetensorsMalformed, HeaderOverLimit) {
  Bytes file = file_from_json("{}", 0);
  store_le<uint64_t>(file.data(), 100'000'001);
  expect_rejected(file, "header length 100000001 exceeds the limit of 100000000 bytes");
  SafetensorsLimits small;
  small.max_header_bytes = 40;
  expect_rejected(file_from_json(std::string("{") + kGoodEntry + "}", 8), "exceeds the limit of 40",
                  StatusCode::kDataLoss, small);
}

TEST(SafetensorsMalformed, InvalidUtf8) {
  // A stray continuation byte, an overlong '/', a UTF-16 surrogate, above U+10FFFF, truncated.
  for (const std::string bad :
       {"\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    expect_rejected(file_from_json("{\"x" + bad + "\":1}", 0),
                    "header is not valid UTF-8 at file offset 11");
  }
}

TEST(SafetensorsMalformed, InvalidJson) {
  expect_rejected(file_from_json(R"({"a":{"dtype":"F32",)", 0), "not valid JSON");
  expect_rejected(file_from_json(std::string("{") + kGoodEntry + "} x", 8), "not valid JSON");
  expect_rejected(file_from_json("", 0), "not valid JSON");
  expect_rejected(file_from_json("\xef\xbb\xbf{}", 0), "byte order mark");
  // nlohmann stops at a NUL byte; what follows must not be ignored.
  expect_rejected(file_from_json(std::string("{}\0{\"x\":1}", 8), 0), "NUL byte at file offset 10");
  // Messages stay valid UTF-8: the half character nlohmann quotes is escaped.
  expect_rejected(file_from_json("{\xc3\xa9}", 0), "last read: '{\\xc3'");
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  expect_rejected(file_from_json("[1, 2]", 0), "header is a JSON array, not a JSON object");
  expect_rejected(file_from_json("\"text\"", 0), "header is a JSON string, not a JSON object");
}

TEST(SafetensorsMalformed, DuplicateTensorName) {
  expect_rejected(file_from_json(std::string("{") + kGoodEntry + "," + kGoodEntry + "}", 8),
                  "duplicate key: tensor 'a' appears twice");
}

TEST(SafetensorsMalformed, DuplicateFieldInEntry) {
  expect_rejected(
      file_from_json(R"({"a":{"dtype":"F32","shape":[2],"dtype":"F32","data_offsets":[0,8]}})", 8),
      "tensor 'a' has field 'dtype' twice");
  expect_rejected(
      file_from_json(R"({"a":{"x":1,"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":2}})", 8),
      "tensor 'a' has field 'x' twice");
}

TEST(SafetensorsMalformed, DuplicateMetadataKey) {
  expect_rejected(file_from_json(R"({"__metadata__":{"k":"1","k":"2"}})", 0),
                  "__metadata__ entry 'k' appears twice");
  expect_rejected(file_from_json(R"({"__metadata__":{},"__metadata__":{}})", 0),
                  "__metadata__ appears twice");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_rejected(file_from_json(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8),
                  "tensor 'a': unknown safetensors dtype 'Q7'");
  expect_rejected(file_from_json(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8),
                  "tensor 'a': dtype is a JSON number, not a string");
  // Valid safetensors, but not a dtype weightcast has: a different code.
  expect_rejected(file_from_json(R"({"a":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", 8),
                  "dtype 'U16' is not supported", StatusCode::kUnimplemented);
}

TEST(SafetensorsMalformed, NegativeOrNonIntegerShape) {
  const auto with_shape = [](const std::string& shape) {
    return file_from_json(R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,8]}})",
                          8);
  };
  expect_rejected(with_shape("[-2]"), "tensor 'a': shape dimension 0 is -2");
  expect_rejected(with_shape("[1, 2.0]"), "tensor 'a': shape dimension 1 is 2.0");
  expect_rejected(with_shape("[\"2\"]"), "shape dimension 0 is a JSON string");
  expect_rejected(with_shape("[-0]"), "shape dimension 0 is -0");  // a float to serde_json
  expect_rejected(with_shape("[9223372036854775808]"), "is 9223372036854775808");
  expect_rejected(with_shape("2"), "tensor 'a': shape is a JSON number, not an array");
}

TEST(SafetensorsMalformed, MissingDataOffsets) {
  expect_rejected(file_from_json(R"({"a":{"dtype":"F32","shape":[2]}})", 8),
                  "tensor 'a': missing data_offsets");
  expect_rejected(file_from_json(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8),
                  "tensor 'a': missing dtype");
  expect_rejected(file_from_json(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
                  "tensor 'a': data_offsets has 1 elements, not 2");
  expect_rejected(file_from_json(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8),
                  "tensor 'a': data_offsets has more than 2 elements");
  expect_rejected(file_from_json(R"({"a":[0,8]})", 8),
                  "tensor 'a': its header entry is a JSON array, not an object");
}

TEST(SafetensorsMalformed, BeginAfterEnd) {
  expect_rejected(file_from_json(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
                  "tensor 'a': data_offsets [8, 0] end before they begin");
}

TEST(SafetensorsMalformed, ShapeTimesSizeDiffersFromByteRange) {
  expect_rejected(file_from_json(R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8),
                  "tensor 'a': shape [3] of BF16 needs 6 bytes but data_offsets [0, 8] hold 8");
  expect_rejected(
      file_from_json(
          R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
      "tensor 'a': shape has more than 2^62 elements");
}

TEST(SafetensorsMalformed, GapBetweenRanges) {
  expect_rejected(file_from_json(std::string("{") + kGoodEntry +
                                     R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                 16),
                  "gap: data bytes [8, 12) between tensor 'a' [0, 8] and tensor 'b' [12, 16]");
}

TEST(SafetensorsMalformed, OverlappingRanges) {
  expect_rejected(file_from_json(std::string("{") + kGoodEntry +
                                     R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 12),
                  "overlap: tensor 'b' [4, 12] overlaps tensor 'a' [0, 8]");
  // A zero-size tensor inside another one also overlaps it.
  expect_rejected(file_from_json(std::string("{") + kGoodEntry +
                                     R"(,"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                 8),
                  "overlap: tensor 'z' [4, 4] overlaps tensor 'a' [0, 8]");
}

TEST(SafetensorsMalformed, RangesNotStartingAtZero) {
  expect_rejected(file_from_json(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                  "tensor 'a' [4, 12] is the first in the data section but does not start at "
                  "offset 0");
}

TEST(SafetensorsMalformed, TrailingBytesAfterLastRange) {
  expect_rejected(file_from_json(std::string("{") + kGoodEntry + "}", 11),
                  "3 trailing bytes: the tensors' data ends at data offset 8");
  expect_rejected(file_from_json("{}", 1), "1 trailing bytes");
}

TEST(SafetensorsMalformed, BytesMissingAtTheEnd) {
  expect_rejected(file_from_json(std::string("{") + kGoodEntry + "}", 5),
                  "truncated: tensor 'a' [0, 8] ends 3 bytes past the end of the file");
}

TEST(SafetensorsMalformed, MetadataNotAStringMap) {
  expect_rejected(file_from_json(R"({"__metadata__":{"k":1}})", 0),
                  "__metadata__ entry 'k' is a JSON number, not a string");
  expect_rejected(file_from_json(R"({"__metadata__":{"k":{"x":"y"}}})", 0),
                  "__metadata__ entry 'k' is a JSON object, not a string");
  expect_rejected(file_from_json(R"({"__metadata__":["k","v"]})", 0),
                  "__metadata__ is a JSON array, not an object of strings");
}

TEST(SafetensorsMalformed, TooManyDimensions) {
  std::string shape = "[1";
  for (int i = 1; i < 65; ++i) shape += ",1";
  expect_rejected(
      file_from_json(R"({"a":{"dtype":"F32","shape":)" + shape + R"(],"data_offsets":[0,4]}})", 4),
      "tensor 'a': shape has more than 64 dimensions");
}

TEST(SafetensorsMalformed, NamesAndCountsBeyondLimits) {
  expect_rejected(file_from_json(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                  "empty name");
  SafetensorsLimits limits;
  limits.max_name_bytes = 4;
  expect_rejected(
      file_from_json(R"({"abcde":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
      "tensor name 'abcde' exceeds the limit of 4 bytes", StatusCode::kDataLoss, limits);
  limits = {};
  limits.max_tensors = 1;
  expect_rejected(file_from_json(std::string("{") + kGoodEntry +
                                     R"(,"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                                 8),
                  "more than 1 tensors", StatusCode::kDataLoss, limits);
}

}  // namespace
}  // namespace weightcast
