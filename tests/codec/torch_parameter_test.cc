// nn.Parameter values in a torch.save'd dict: _rebuild_parameter and
// _rebuild_parameter_with_state in the forms a plain Parameter takes read as their data
// tensor; every other form is refused with a message naming the global.
#include "codec/formats/torch_pickle.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "tests/codec/pickle_asm.h"
#include "tests/codec/torch_parameter_pickle.h"
#include "tests/test_bytes.h"

namespace weightcast {
namespace {

using testing::Asm;
using testing::Bytes;
using testing::from_hex;
using testing::kParameterPickle;

// kParameterPickle's program (tests/codec/torch_parameter_pickle.h) with two Parameters (the second
// reuses memoised globals and tuples), and below with _rebuild_parameter_with_state, from Python's
// protocol-2 pickler over the same reduce tuples.
constexpr std::string_view kTwoParametersPickle =
    "80027d710028580100000077710163746f7263682e5f7574696c730a5f72656275696c645f706172616d657465"
    "720a710263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a710328285807000000"
    "73746f72616765710463746f7263680a466c6f617453746f726167650a71055801000000307106580300000063"
    "707571074b03747108514b004b038571094b0185710a8963636f6c6c656374696f6e730a4f72646572656444"
    "6963740a710b2952710c74710d52710e88680b2952710f877110527111580100000062711268026803282868046"
    "805580100000031711368074b01747114514b00680a680a89680b2952711574711652711788680b295271188771"
    "1952711a752e";

// _rebuild_parameter_with_state(<tensor>, False, OrderedDict(), {}).
constexpr std::string_view kParameterWithStatePickle =
    "80027d7100580100000077710163746f7263682e5f7574696c730a5f72656275696c645f706172616d657465725f"
    "776974685f73746174650a71022863746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76"
    "320a71032828580700000073746f72616765710463746f7263680a466c6f617453746f726167650a710558010000"
    "00307106580300000063707571074b03747108514b004b038571094b0185710a8963636f6c6c656374696f6e73"
    "0a4f726465726564446963740a710b2952710c74710d52710e89680b2952710f7d7110747111527112732e";

void expect_error(const Bytes& pickle, std::string_view fragment) {
  auto r = read_torch_pickle(pickle);
  ASSERT_FALSE(r.ok()) << "parsed although it should fail with: " << fragment;
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().to_string();
}

void expect_one_f32(const Result<std::vector<PickledTensor>>& r, const std::string& name,
                    const std::string& key, int64_t n) {
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  const PickledTensor& t = (*r)[0];
  EXPECT_EQ(t.name, name);
  EXPECT_EQ(t.storage_key, key);
  EXPECT_EQ(t.dtype, DType::kF32);
  EXPECT_EQ(t.storage_numel, static_cast<uint64_t>(n));
  EXPECT_EQ(t.storage_offset, 0);
  EXPECT_EQ(t.shape, std::vector<int64_t>{n});
  EXPECT_EQ(t.stride, std::vector<int64_t>{1});
}

// {'w': <fn>(<3-element f32 tensor>, <args...>)}: `args` assembles what follows the tensor.
template <typename Args>
Bytes parameter(std::string_view fn, Args args, uint8_t tuple_op = 't') {
  Asm a;
  a.proto().op('}').str("w").global("torch._utils", fn).op('(');
  a.tensor_v2("FloatStorage", "0", 3, 3);
  args(a);
  return a.op(tuple_op).op('R').op('s').done();
}

Asm& ordered_dict(Asm& a) {
  return a.global("collections", "OrderedDict").op(')').op('R');
}

TEST(TorchParameter, ReadsAParameterAsItsTensor) {
  expect_one_f32(read_torch_pickle(from_hex(kParameterPickle)), "w", "0", 3);
}

TEST(TorchParameter, ReadsTwoParametersSharingMemoEntries) {
  auto r = read_torch_pickle(from_hex(kTwoParametersPickle));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "w");
  EXPECT_EQ((*r)[0].shape, std::vector<int64_t>{3});
  EXPECT_EQ((*r)[1].name, "b");
  EXPECT_EQ((*r)[1].storage_key, "1");
  EXPECT_EQ((*r)[1].shape, std::vector<int64_t>{1});
}

TEST(TorchParameter, ReadsAParameterWithEmptyState) {
  expect_one_f32(read_torch_pickle(from_hex(kParameterWithStatePickle)), "w", "0", 3);
  // None as the state, too.
  const Bytes none =
      parameter("_rebuild_parameter_with_state", [](Asm& a) { ordered_dict(a.op(0x88)).op('N'); });
  expect_one_f32(read_torch_pickle(none), "w", "0", 3);
}

TEST(TorchParameterMalformed, WrongArgumentCount) {
  expect_error(parameter("_rebuild_parameter", [](Asm& a) { a.op(0x88); }),
               "_rebuild_parameter with 2 arguments");
  expect_error(parameter("_rebuild_parameter", [](Asm& a) { ordered_dict(a.op(0x88)).op('}'); }),
               "_rebuild_parameter with 4 arguments");
  expect_error(parameter("_rebuild_parameter_with_state", [](Asm& a) { ordered_dict(a.op(0x88)); }),
               "_rebuild_parameter_with_state with 3 arguments");
}

TEST(TorchParameterMalformed, RequiresGradNotABool) {
  expect_error(parameter("_rebuild_parameter", [](Asm& a) { ordered_dict(a.int1(1)); }),
               "_rebuild_parameter arguments are not (rebuilt tensor, requires_grad bool");
}

TEST(TorchParameterMalformed, DataNotATensor) {
  Asm a;
  a.proto().op('}').str("w").global("torch._utils", "_rebuild_parameter").op('(').int1(3);
  ordered_dict(a.op(0x88)).op('t').op('R').op('s');
  expect_error(a.done(), "_rebuild_parameter arguments are not (rebuilt tensor");
}

TEST(TorchParameterMalformed, HooksNotEmpty) {
  expect_error(parameter("_rebuild_parameter",
                         [](Asm& a) { ordered_dict(a.op(0x88)).str("h").int1(1).op('s'); }),
               "_rebuild_parameter with backward hooks that are not an empty OrderedDict()");
}

TEST(TorchParameterMalformed, HooksAPlainDict) {
  expect_error(parameter("_rebuild_parameter", [](Asm& a) { a.op(0x88).op('}'); }),
               "_rebuild_parameter with backward hooks that are not an empty OrderedDict()");
}

TEST(TorchParameterMalformed, StateNotEmpty) {
  expect_error(
      parameter("_rebuild_parameter_with_state",
                [](Asm& a) { ordered_dict(a.op(0x88)).op('}').str("_tag").int1(1).op('s'); }),
      "_rebuild_parameter_with_state with Parameter attributes (state)");
  expect_error(
      parameter("_rebuild_parameter_with_state", [](Asm& a) { ordered_dict(a.op(0x88)).int1(0); }),
      "_rebuild_parameter_with_state with Parameter attributes (state)");
}

TEST(TorchParameterMalformed, OtherParameterGlobalsStayForbidden) {
  expect_error(Asm().proto().global("torch._utils", "_rebuild_parameter_v2").done(),
               "forbidden global 'torch._utils._rebuild_parameter_v2'");
  expect_error(Asm().proto().global("torch.nn.parameter", "Parameter").done(),
               "forbidden global 'torch.nn.parameter.Parameter'");
}

}  // namespace
}  // namespace weightcast
