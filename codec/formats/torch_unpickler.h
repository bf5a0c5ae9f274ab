// Internal to the torch pickle codec, not API (that is codec/formats/torch_pickle.h): the
// restricted unpickler's values and stack machine. Its opcode handlers and the helpers declared
// here are defined in torch_pickle_reader.cc, the only user.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/base/status.h"
#include "codec/dtype.h"
#include "codec/formats/pickle_opcodes.h"
#include "codec/formats/torch_pickle.h"

namespace weightcast::pickle_internal {

// clang-format off
enum class Kind : uint8_t {
  kNone, kBool, kInt, kString, kTuple, kDict, kGlobal, kStorage, kTensor
};
// The allowed globals: what each one is.
enum class Callable : uint8_t {
  kRebuildV2, kRebuildV3, kOrderedDict, kTypedStorage, kUntypedStorage, kDType,
  kRebuildParameter, kRebuildParameterWithState
};
// clang-format on

// A value on the stack or in the memo: scalars inline, everything else an index into the
// unpickler's tables. Values are never copied deeply, so memo references (BINGET) share the
// object like Python does, and nothing a hostile pickle builds can be cyclic in C++ ownership.
struct Val {
  Kind kind = Kind::kNone;
  Callable callable = Callable::kOrderedDict;  // kGlobal
  DType dtype = DType::kF32;                   // kGlobal of a storage class or a dtype
  uint32_t ref = 0;                            // kString, kTuple, kDict, kStorage, kTensor
  int64_t num = 0;                             // kBool, kInt
};

struct Dict {
  bool ordered = false;  // made by collections.OrderedDict()
  std::vector<std::pair<Val, Val>> items;
};

struct Storage {
  std::string key;
  bool typed = true;
  DType dtype = DType::kF32;  // typed: the class's dtype; untyped: the dtype of its views
  uint64_t numel = 0;         // as declared: elements (typed) or bytes (untyped)
  bool viewed = false;
  DType view_dtype = DType::kF32;
};

// The opcode's name, or nullptr for an opcode the reader does not know.
const char* op_name(uint8_t op);

// "0x" and two hex digits.
std::string hex_byte(uint8_t v);

class Unpickler {
 public:
  Unpickler(std::span<const uint8_t> in, const TorchPickleLimits& limits)
      : in_(in), limits_(limits) {}

  Result<std::vector<PickledTensor>> run() {
    if (in_.size() > limits_.max_pickle_bytes) {
      return out_of_range("torch pickle: " + std::to_string(in_.size()) +
                          " bytes exceed the limit of " + std::to_string(limits_.max_pickle_bytes));
    }
    while (pos_ < in_.size()) {
      op_at_ = pos_;
      op_ = in_[pos_++];
      if (op_ == kStop) return finish();
      RETURN_IF_ERROR(step());
    }
    return data_loss("torch pickle: missing STOP (the " + std::to_string(in_.size()) +
                     "-byte program ends without one)");
  }

 private:
  // "torch pickle: <what> at offset N (OPNAME)".
  Status err(const std::string& what) const {
    const char* name = op_name(op_);
    return data_loss("torch pickle: " + what + " at offset " + std::to_string(op_at_) + " (" +
                     (name ? name : hex_byte(op_)) + ")");
  }
  Status limit(const std::string& what) const {
    return out_of_range("torch pickle: " + what + " at offset " + std::to_string(op_at_));
  }

  Status read(size_t n, const uint8_t** out) {
    if (in_.size() - pos_ < n) return err("truncated argument");
    *out = in_.data() + pos_;
    pos_ += n;
    return ok_status();
  }
  template <typename T>
  Status read_le(T* v) {
    const uint8_t* p = nullptr;
    RETURN_IF_ERROR(read(sizeof(T), &p));
    *v = load_le<T>(p);
    return ok_status();
  }
  Status read_line(std::string_view* line) {
    const size_t max = std::min(in_.size() - pos_, limits_.max_string_bytes + 1);
    const auto* begin = reinterpret_cast<const char*>(in_.data() + pos_);
    const size_t n = std::string_view(begin, max).find('\n');
    if (n == std::string_view::npos) return err("unterminated or overlong GLOBAL name");
    *line = std::string_view(begin, n);
    pos_ += n + 1;
    return ok_status();
  }

  size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  Status push(Val v) {
    if (stack_.size() >= limits_.max_stack_depth) return limit("stack deeper than the limit");
    stack_.push_back(v);
    return ok_status();
  }
  Status pop(Val* v) {
    if (stack_.size() <= base()) return err("stack underflow");
    *v = stack_.back();
    stack_.pop_back();
    return ok_status();
  }
  Status top(Val** v) {
    if (stack_.size() <= base()) return err("stack underflow");
    *v = &stack_.back();
    return ok_status();
  }
  Status pop_mark(std::vector<Val>* items) {
    if (marks_.empty()) return err("no MARK to pop to");
    items->assign(stack_.begin() + static_cast<ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return ok_status();
  }
  Status push_tuple(std::vector<Val> items) {
    tuples_.push_back(std::move(items));
    return push(Val{.kind = Kind::kTuple, .ref = static_cast<uint32_t>(tuples_.size() - 1)});
  }
  Status push_int(int64_t v) { return push(Val{.kind = Kind::kInt, .num = v}); }
  Status push_dict(bool ordered) {
    dicts_.push_back(Dict{.ordered = ordered, .items = {}});
    return push(Val{.kind = Kind::kDict, .ref = static_cast<uint32_t>(dicts_.size() - 1)});
  }
  Status add_items(Val dict, std::span<const Val> kv) {
    if (dict.kind != Kind::kDict) return err("item assignment to a non-dict");
    item_count_ += kv.size() / 2;
    if (item_count_ > 2 * limits_.max_tensors + 1024) return limit("too many dict items");
    for (size_t i = 0; i + 1 < kv.size(); i += 2)
      dicts_[dict.ref].items.emplace_back(kv[i], kv[i + 1]);
    return ok_status();
  }
  Status memo_put(uint32_t index) {
    Val* v = nullptr;
    RETURN_IF_ERROR(top(&v));
    if (memo_.size() >= limits_.max_memo_entries && !memo_.contains(index)) {
      return limit("memo larger than the limit");
    }
    memo_[index] = *v;
    return ok_status();
  }
  Status memo_get(uint32_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return err("memo entry " + std::to_string(index) + " missing");
    return push(it->second);
  }

  Status step();
  Status global();
  Status persistent_id();
  Status reduce();
  Status rebuild_tensor(bool v3, const std::vector<Val>& args, Val* result);
  Status rebuild_parameter(bool with_state, const std::vector<Val>& args, Val* result);
  Result<std::vector<PickledTensor>> finish();

  std::span<const uint8_t> in_;
  const TorchPickleLimits& limits_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  uint8_t op_ = 0;
  std::vector<Val> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::unordered_map<uint32_t, Val> memo_;
  std::vector<std::string> strings_;
  std::vector<std::vector<Val>> tuples_;
  std::vector<Dict> dicts_;
  std::vector<Storage> storages_;
  std::unordered_map<std::string, uint32_t> storage_by_key_;
  std::vector<PickledTensor> tensors_;
  size_t item_count_ = 0;
};

}  // namespace weightcast::pickle_internal
