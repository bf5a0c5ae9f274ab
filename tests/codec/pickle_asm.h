// A pickle assembler for the torch pickle tests (torch_pickle_test.cc,
// torch_parameter_test.cc): the shapes Python writes and hostile ones, one opcode at a time.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "codec/base/byte_io.h"
#include "tests/test_bytes.h"

namespace weightcast::testing {

class Asm {
 public:
  Asm& op(uint8_t code) {
    b_.push_back(code);
    return *this;
  }
  Asm& u8(uint8_t v) { return op(v); }
  Asm& str(std::string_view s) {
    op('X');
    append_le<uint32_t>(&b_, static_cast<uint32_t>(s.size()));
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Asm& global(std::string_view module, std::string_view name) {
    op('c');
    b_.insert(b_.end(), module.begin(), module.end());
    b_.push_back('\n');
    b_.insert(b_.end(), name.begin(), name.end());
    b_.push_back('\n');
    return *this;
  }
  Asm& int1(uint8_t v) { return op('K').u8(v); }
  Asm& bin_int(int32_t v) {
    op('J');
    append_le<int32_t>(&b_, v);
    return *this;
  }
  Asm& proto() { return op(0x80).u8(2); }
  // ('storage', torch.<cls>, key, 'cpu', numel) BINPERSID
  Asm& pid(std::string_view cls, std::string_view key, uint8_t numel,
           std::string_view module = "torch") {
    return op('(')
        .str("storage")
        .global(module, cls)
        .str(key)
        .str("cpu")
        .int1(numel)
        .op('t')
        .op('Q');
  }
  // _rebuild_tensor_v2(storage pushed by `pid`, offset, (n,), (1,), False, OrderedDict())
  Asm& tensor_v2(std::string_view cls, std::string_view key, uint8_t numel, uint8_t n,
                 uint8_t offset = 0) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    pid(cls, key, numel).int1(offset).int1(n).op(0x85).int1(1).op(0x85).op(0x89);
    return global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
  }
  Bytes bytes() const { return b_; }
  Bytes done() {
    op('.');
    return b_;
  }

 private:
  Bytes b_;
};

}  // namespace weightcast::testing
