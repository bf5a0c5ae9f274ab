#include "codec/formats/torch_pickle.h"
#include "tests/codec/pickle_asm.h"
#include "tests/test_bytes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codec/base/byte_io.h"

namespace weightcast {
namespace {

using testing::Asm;
using testing::Bytes;
using testing::from_hex;

void expect_error(const Bytes& pickle, StatusCode code, std::string_view fragment,
                  const TorchPickleLimits& limits = {}) {
  auto r = read_torch_pickle(pickle, limits);
  ASSERT_FALSE(r.ok()) << "parsed although it should fail with: " << fragment;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().to_string();
}

void expect_same(const std::vector<PickledTensor>& a, const std::vector<PickledTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].storage_key, b[i].storage_key) << a[i].name;
    EXPECT_EQ(a[i].dtype, b[i].dtype) << a[i].name;
    EXPECT_EQ(a[i].storage_numel, b[i].storage_numel) << a[i].name;
    EXPECT_EQ(a[i].storage_offset, b[i].storage_offset) << a[i].name;
    EXPECT_EQ(a[i].shape, b[i].shape) << a[i].name;
    EXPECT_EQ(a[i].stride, b[i].stride) << a[i].name;
  }
}

std::vector<PickledTensor> sample() {
  return {
      {"a", "0", DType::kF32, 12, 0, {3, 4}, {4, 1}},
      {"a.t", "0", DType::kF32, 12, 0, {4, 3}, {1, 4}},  // alias, transposed
      {"a.row2", "0", DType::kF32, 12, 8, {4}, {1}},     // alias with an offset
      {"scalar", "1", DType::kBF16, 1, 0, {}, {}},
      {"empty", "2", DType::kI64, 0, 0, {0, 5}, {5, 1}},
      {"rank5", "3", DType::kU8, 300, 7, {1, 2, 3, 4, 5}, {300, 60, 20, 5, 1}},
      {"big", "4", DType::kF16, int64_t{1} << 40, (int64_t{1} << 40) - 70000, {70000}, {1}},
      {"fp8", "5", DType::kF8E4M3FN, 64, 3, {2, 8}, {16, 2}},
      {"fp8.alias", "5", DType::kF8E4M3FN, 64, 0, {64}, {1}},
      {"e5m2", "6", DType::kF8E5M2, 4, 0, {4}, {1}},
      {"\xc3\xa9t\xc3\xa9", "7", DType::kBool, 2, 1, {1}, {1}},  // UTF-8 name
  };
}

TEST(TorchPickle, RoundTripsAliasesOffsetsStridesAndFp8) {
  const auto tensors = sample();
  auto pickle = write_torch_pickle(tensors);
  ASSERT_TRUE(pickle.ok()) << pickle.status().to_string();
  EXPECT_EQ((*pickle)[0], 0x80);
  EXPECT_EQ((*pickle)[1], 2);
  auto back = read_torch_pickle(*pickle);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*back, tensors);
}

TEST(TorchPickle, WritesLegacyStorageClassesAndV3OnlyForFp8) {
  auto pickle = write_torch_pickle(sample());
  ASSERT_TRUE(pickle.ok());
  const std::string text(pickle->begin(), pickle->end());
  EXPECT_NE(text.find("ctorch._utils\n_rebuild_tensor_v2\n"), std::string::npos);
  EXPECT_NE(text.find("ctorch\nFloatStorage\n"), std::string::npos);
  EXPECT_NE(text.find("ctorch\nBFloat16Storage\n"), std::string::npos);
  EXPECT_NE(text.find("ctorch._utils\n_rebuild_tensor_v3\n"), std::string::npos);
  EXPECT_NE(text.find("ctorch.storage\nUntypedStorage\n"), std::string::npos);
  EXPECT_NE(text.find("ctorch\nfloat8_e4m3fn\n"), std::string::npos);
  EXPECT_EQ(text.find("Float8_e4m3fnStorage"), std::string::npos);  // no such torch class
  // Recurring strings are memoised once: 'storage' and 'cpu' appear a single time.
  EXPECT_EQ(text.find("storage", text.find("storage") + 1), text.find("storage\nUntypedStorage"));
  EXPECT_EQ(text.find("cpu", text.find("cpu") + 1), std::string::npos);
}

TEST(TorchPickle, IntegerEncodingsRoundTrip) {
  std::vector<PickledTensor> tensors;
  const int64_t offsets[] = {0,
                             255,
                             256,
                             65535,
                             65536,
                             0x7FFFFFFF,
                             0x80000000LL,
                             int64_t{1} << 40,
                             0xFFFFFFFFFFLL,
                             (int64_t{1} << 55) - 1,
                             (int64_t{1} << 59) + 12345};
  for (int64_t off : offsets) {
    tensors.push_back({"t" + std::to_string(off),
                       "s" + std::to_string(off),
                       DType::kU8,
                       static_cast<uint64_t>(off) + 1,
                       off,
                       {1},
                       {1}});
  }
  auto pickle = write_torch_pickle(tensors);
  ASSERT_TRUE(pickle.ok());
  auto back = read_torch_pickle(*pickle);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*back, tensors);
}

TEST(TorchPickle, ManyTensorsUseBatchesAndLongMemo) {
  // > 1000 items: several SETITEMS batches; > 256 memo entries: LONG_BINPUT / LONG_BINGET.
  std::vector<PickledTensor> tensors;
  for (int i = 0; i < 2500; ++i) {
    tensors.push_back({"layer." + std::to_string(i),
                       std::to_string(i / 2),
                       DType::kBF16,
                       16,
                       (i % 2) * 8,
                       {8},
                       {1}});
  }
  auto pickle = write_torch_pickle(tensors);
  ASSERT_TRUE(pickle.ok());
  auto back = read_torch_pickle(*pickle);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*back, tensors);
}

TEST(TorchPickle, SingleAndNoTensors) {
  for (size_t n : {0, 1}) {
    const auto all = sample();
    std::vector<PickledTensor> tensors(all.begin(), all.begin() + static_cast<ptrdiff_t>(n));
    auto pickle = write_torch_pickle(tensors);
    ASSERT_TRUE(pickle.ok());
    auto back = read_torch_pickle(*pickle);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    expect_same(*back, tensors);
  }
}

// data.pkl of `torch.save(torch.nn.Linear(2, 1).state_dict())` by torch 1.13: an
// OrderedDict with BUILD of its _metadata, and memo references throughout.
constexpr std::string_view kStateDictPickle =
    "800263636f6c6c656374696f6e730a4f726465726564446963740a71002952710128580600000077656967687471"
    "0263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a71032828580700000073746f"
    "72616765710463746f7263680a466c6f617453746f726167650a7105580100000030710658030000006370757107"
    "4b02747108514b004b014b028671094b024b0186710a8968002952710b74710c52710d580400000062696173710e"
    "6803282868046805580100000031710f68074b01747110514b004b018571114b0185711289680029527113747114"
    "527115757d711658090000005f6d657461646174617117680029527118580000000071197d711a58070000007665"
    "7273696f6e711b4b01737373622e";

TEST(TorchPickle, ReadsPythonStateDict) {
  auto r = read_torch_pickle(from_hex(kStateDictPickle));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same(*r, {{"weight", "0", DType::kF32, 2, 0, {1, 2}, {2, 1}},
                   {"bias", "1", DType::kF32, 1, 0, {1}, {1}}});
}

TEST(TorchPickle, ReadsTorch2Fp8Form) {
  // What torch >= 2.1 writes for a float8 tensor: v3, UntypedStorage (numel in bytes), dtype.
  Asm a;
  a.proto().op('}').str("w").global("torch._utils", "_rebuild_tensor_v3").op('(');
  a.pid("UntypedStorage", "0", 6, "torch.storage").int1(0).int1(2).int1(3).op(0x86);
  a.int1(3).int1(1).op(0x86).op(0x89).global("collections", "OrderedDict").op(')').op('R');
  a.global("torch", "float8_e5m2").op('t').op('R').op('s');
  auto r = read_torch_pickle(a.done());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same(*r, {{"w", "0", DType::kF8E5M2, 6, 0, {2, 3}, {3, 1}}});
}

TEST(TorchPickle, WriterRefusesInconsistentInput) {
  const auto code = [](std::vector<PickledTensor> t) { return write_torch_pickle(t).status(); };
  EXPECT_NE(code({{"a", "0", DType::kF32, 1, 0, {}, {}}, {"a", "1", DType::kF32, 1, 0, {}, {}}})
                .message()
                .find("appears twice"),
            std::string::npos);
  EXPECT_NE(code({{"\xff", "0", DType::kF32, 1, 0, {}, {}}}).message().find("not UTF-8"),
            std::string::npos);
  EXPECT_NE(code({{"a", "0", DType::kF32, 4, 0, {}, {}}, {"b", "0", DType::kF16, 4, 0, {}, {}}})
                .message()
                .find("two different dtypes or numels"),
            std::string::npos);
  EXPECT_EQ(code({{"a", "0", DType::kF32, 4, 0, {2}, {}}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"a", "0", DType::kF32, 4, 0, {2}, {-1}}}).code(), StatusCode::kInvalidArgument);
}

// ---- malformed pickles: one test per case ----

TEST(TorchPickleMalformed, UnknownOpcode) {
  // FRAME (protocol 4) right after PROTO.
  expect_error(Asm().proto().op(0x95).done(), StatusCode::kDataLoss,
               "unsupported opcode 0x95 at offset 2");
}

TEST(TorchPickleMalformed, InstOpcodeNeverExecutes) {
  expect_error(Asm().proto().op('i').done(), StatusCode::kDataLoss, "unsupported opcode 0x69");
}

TEST(TorchPickleMalformed, ForbiddenGlobalOsSystem) {
  expect_error(Asm().proto().global("os", "system").str("echo pwned").op(0x85).op('R').done(),
               StatusCode::kDataLoss, "forbidden global 'os.system' at offset 2 (GLOBAL)");
}

TEST(TorchPickleMalformed, ForbiddenGlobalBuiltinsEval) {
  expect_error(Asm().proto().global("builtins", "eval").done(), StatusCode::kDataLoss,
               "forbidden global 'builtins.eval'");
}

TEST(TorchPickleMalformed, ForbiddenFictitiousStorageClass) {
  expect_error(Asm().proto().global("torch", "Float8_e4m3fnStorage").done(), StatusCode::kDataLoss,
               "forbidden global 'torch.Float8_e4m3fnStorage'");
}

TEST(TorchPickleMalformed, PersistentIdWrongShape) {
  Asm a;
  a.proto().op('(').str("storage").global("torch", "FloatStorage").str("0").str("cpu").op('t');
  expect_error(a.op('Q').done(), StatusCode::kDataLoss,
               "persistent id is not ('storage', <storage class>, key, location, numel)");
}

TEST(TorchPickleMalformed, PersistentIdNotStorage) {
  Asm a;
  a.proto().op('(').str("module").global("torch", "FloatStorage").str("0").str("cpu").int1(1);
  expect_error(a.op('t').op('Q').done(), StatusCode::kDataLoss, "persistent id is not");
}

TEST(TorchPickleMalformed, StackUnderflow) {
  expect_error(Asm().proto().int1(1).op(0x86).done(), StatusCode::kDataLoss,
               "stack underflow at offset 4 (TUPLE2)");
}

TEST(TorchPickleMalformed, UnderflowAcrossMark) {
  expect_error(Asm().proto().op('}').op('(').op('s').done(), StatusCode::kDataLoss,
               "stack underflow");
}

TEST(TorchPickleMalformed, MemoMiss) {
  expect_error(Asm().proto().op('h').u8(5).done(), StatusCode::kDataLoss, "memo entry 5 missing");
}

TEST(TorchPickleMalformed, MissingStop) {
  expect_error(Asm().proto().op('}').bytes(), StatusCode::kDataLoss, "missing STOP");
}

TEST(TorchPickleMalformed, TrailingGarbage) {
  Bytes p = Asm().proto().op('}').done();
  p.push_back(0);
  expect_error(p, StatusCode::kDataLoss, "1 trailing bytes after STOP");
}

TEST(TorchPickleMalformed, TruncatedArgument) {
  Bytes p = Asm().proto().str("abcdef").bytes();
  p.resize(p.size() - 3);
  expect_error(p, StatusCode::kDataLoss, "truncated argument at offset 2 (BINUNICODE)");
}

TEST(TorchPickleMalformed, TopLevelNotADict) {
  expect_error(Asm().proto().int1(3).done(), StatusCode::kDataLoss,
               "top-level object is not a dict");
}

TEST(TorchPickleMalformed, ValueNotATensor) {
  expect_error(Asm().proto().op('}').str("a").int1(3).op('s').done(), StatusCode::kDataLoss,
               "not str -> tensor");
}

TEST(TorchPickleMalformed, DuplicateKey) {
  Asm a;
  a.proto().op('}').op('(').str("k").tensor_v2("FloatStorage", "0", 2, 2);
  a.str("k").tensor_v2("FloatStorage", "0", 2, 1).op('u');
  expect_error(a.done(), StatusCode::kDataLoss, "duplicate key 'k'");
}

TEST(TorchPickleMalformed, StopWithExtraValues) {
  expect_error(Asm().proto().op('}').op('}').done(), StatusCode::kDataLoss, "STOP with 2 values");
}

TEST(TorchPickleMalformed, ReduceOfStorageClass) {
  expect_error(Asm().proto().global("torch", "FloatStorage").op(')').op('R').done(),
               StatusCode::kDataLoss, "REDUCE of something that is not a tensor rebuild");
}

TEST(TorchPickleMalformed, RebuildWithWrongArity) {
  Asm a;
  a.proto().global("torch._utils", "_rebuild_tensor_v2").op('(').pid("FloatStorage", "0", 1);
  expect_error(a.int1(0).op('t').op('R').done(), StatusCode::kDataLoss,
               "_rebuild_tensor_v2 with 2 arguments");
}

TEST(TorchPickleMalformed, NegativeStride) {
  Asm a;
  a.proto().global("torch._utils", "_rebuild_tensor_v2").op('(').pid("FloatStorage", "0", 4);
  a.int1(0).int1(2).op(0x85).bin_int(-1).op(0x85).op(0x89);
  a.global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
  expect_error(a.done(), StatusCode::kDataLoss, "non-negative integers");
}

TEST(TorchPickleMalformed, TensorMetadataUnsupported) {
  Asm a;
  a.proto().global("torch._utils", "_rebuild_tensor_v2").op('(').pid("FloatStorage", "0", 1);
  a.int1(0).op(')').op(')').op(0x89).global("collections", "OrderedDict").op(')').op('R');
  a.op('}').str("_conj").op(0x88).op('s').op('t').op('R');
  expect_error(a.done(), StatusCode::kDataLoss, "tensor metadata");
}

TEST(TorchPickleMalformed, StorageDeclaredTwiceDifferently) {
  Asm a;
  a.proto().op('}').op('(').str("a").tensor_v2("FloatStorage", "0", 4, 4);
  a.str("b").tensor_v2("FloatStorage", "0", 5, 4).op('u');
  expect_error(a.done(), StatusCode::kDataLoss,
               "storage '0' declared twice with different type or numel");
}

TEST(TorchPickleMalformed, UntypedStorageViewedAsTwoDtypes) {
  Asm a;
  a.proto().op('}').op('(');
  for (const char* dt : {"float8_e4m3fn", "float8_e5m2"}) {
    a.str(dt).global("torch._utils", "_rebuild_tensor_v3").op('(');
    a.pid("UntypedStorage", "0", 4, "torch.storage").int1(0).op(')').op(')').op(0x89);
    a.global("collections", "OrderedDict").op(')').op('R').global("torch", dt).op('t').op('R');
  }
  expect_error(a.op('u').done(), StatusCode::kDataLoss,
               "storage '0' is viewed as both f8_e4m3fn and f8_e5m2");
}

TEST(TorchPickleMalformed, BuildOnPlainDict) {
  expect_error(Asm().proto().op('}').op('}').op('b').done(), StatusCode::kDataLoss,
               "BUILD of something other than an OrderedDict");
}

TEST(TorchPickleMalformed, UnsupportedProtocol) {
  expect_error(Asm().op(0x80).u8(4).op('}').done(), StatusCode::kDataLoss,
               "unsupported protocol 4");
}

TEST(TorchPickleMalformed, LongIntegerWiderThan64Bits) {
  Asm a;
  a.proto().op(0x8a).u8(9);
  for (int i = 0; i < 9; ++i) a.u8(1);
  expect_error(a.done(), StatusCode::kDataLoss, "LONG1 integer of 9 bytes exceeds 64 bits");
}

TEST(TorchPickleMalformed, InvalidUtf8String) {
  expect_error(Asm().proto().str("\xc3(").done(), StatusCode::kDataLoss, "not valid UTF-8");
}

TEST(TorchPickleLimits, StackDepth) {
  Asm a;
  a.proto();
  for (int i = 0; i < 40; ++i) a.int1(1);
  TorchPickleLimits limits;
  limits.max_stack_depth = 32;
  expect_error(a.done(), StatusCode::kOutOfRange, "stack deeper than the limit", limits);
}

TEST(TorchPickleLimits, MarkDepth) {
  Asm a;
  a.proto();
  for (int i = 0; i < 100; ++i) a.op('(');
  expect_error(a.done(), StatusCode::kOutOfRange, "MARKs nested deeper than the limit");
}

TEST(TorchPickleLimits, MemoSize) {
  Asm a;
  a.proto().op('}');
  for (int i = 0; i < 10; ++i) a.op('q').u8(static_cast<uint8_t>(i));
  TorchPickleLimits limits;
  limits.max_memo_entries = 8;
  expect_error(a.done(), StatusCode::kOutOfRange, "memo larger than the limit", limits);
}

TEST(TorchPickleLimits, StringLength) {
  TorchPickleLimits limits;
  limits.max_string_bytes = 10;
  expect_error(Asm().proto().str(std::string(11, 'x')).done(), StatusCode::kOutOfRange,
               "string of 11 bytes", limits);
}

TEST(TorchPickleLimits, TensorCount) {
  auto pickle = write_torch_pickle(sample());
  ASSERT_TRUE(pickle.ok());
  TorchPickleLimits limits;
  limits.max_tensors = 3;
  expect_error(*pickle, StatusCode::kOutOfRange, "more tensors than the limit", limits);
}

}  // namespace
}  // namespace weightcast
