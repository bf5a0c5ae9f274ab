#include "codec/torch_pickle.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "codec/byte_io.h"

namespace weightcast {
namespace {

// Pickle opcodes (CPython Lib/pickle.py), only those this file reads or writes.
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinUnicode = 'X',
  kBuild = 'b',
  kGlobal = 'c',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kSetItems = 'u',
  kEmptyDict = '}',
  kEmptyTuple = ')',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
};

constexpr size_t kBatchSize = 1000;  // Python's pickler batches SETITEMS by 1000
constexpr size_t kMaxRank = 64;

// The torch global naming a dtype: "torch.float8_e4m3fn" -> ("torch", "float8_e4m3fn").
std::pair<std::string_view, std::string_view> dtype_global(DType dtype) {
  const std::string_view full = dtype_info(dtype).torch;
  const size_t dot = full.rfind('.');
  return {full.substr(0, dot), full.substr(dot + 1)};
}

class PickleOut {
 public:
  void op(uint8_t code) { bytes_.push_back(code); }
  void string(std::string_view s) {
    op(kBinUnicode);
    append_le<uint32_t>(&bytes_, static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void global(std::string_view module, std::string_view name) {
    op(kGlobal);
    bytes_.insert(bytes_.end(), module.begin(), module.end());
    bytes_.push_back('\n');
    bytes_.insert(bytes_.end(), name.begin(), name.end());
    bytes_.push_back('\n');
  }
  // Python's save_long for protocol 2: the shortest of BININT1/BININT2/BININT, else LONG1
  // with the minimal two's complement little-endian bytes.
  void integer(int64_t v) {
    if (v >= 0 && v <= 0xff) {
      op(kBinInt1);
      bytes_.push_back(static_cast<uint8_t>(v));
    } else if (v >= 0 && v <= 0xffff) {
      op(kBinInt2);
      append_le<uint16_t>(&bytes_, static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op(kBinInt);
      append_le<int32_t>(&bytes_, static_cast<int32_t>(v));
    } else {
      uint8_t le[8];
      store_le<int64_t>(le, v);
      size_t n = 8;  // drop sign-extension bytes the byte below already implies
      while (n > 1 && ((le[n - 1] == 0x00 && !(le[n - 2] & 0x80)) ||
                       (le[n - 1] == 0xff && (le[n - 2] & 0x80)))) {
        --n;
      }
      op(kLong1);
      bytes_.push_back(static_cast<uint8_t>(n));
      bytes_.insert(bytes_.end(), le, le + n);
    }
  }
  void int_tuple(const std::vector<int64_t>& v) {
    if (v.empty()) return op(kEmptyTuple);
    if (v.size() > 3) op(kMark);
    for (int64_t x : v) integer(x);
    op(v.size() == 1 ? kTuple1 : v.size() == 2 ? kTuple2 : v.size() == 3 ? kTuple3 : kTuple);
  }
  // Strings and globals that recur (storage keys, 'storage', 'cpu', classes) are written
  // once, memoised with BINPUT, and fetched with BINGET afterwards, as Python's pickler does.
  void memo_string(std::string_view s) {
    memoised("s" + std::string(s), [&] { string(s); });
  }
  void memo_global(std::string_view module, std::string_view name) {
    memoised("g" + std::string(module) + "." + std::string(name), [&] { global(module, name); });
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

  // Emits a value once and memoises it under `id`; later calls fetch it with BINGET.
  template <typename Emit>
  void memoised(const std::string& id, Emit emit) {
    auto it = memo_.find(id);
    if (it != memo_.end()) {
      const uint32_t i = it->second;
      if (i < 256) {
        op(kBinGet);
        bytes_.push_back(static_cast<uint8_t>(i));
      } else {
        op(kLongBinGet);
        append_le<uint32_t>(&bytes_, i);
      }
      return;
    }
    emit();
    const uint32_t i = static_cast<uint32_t>(memo_.size());
    memo_.emplace(id, i);
    if (i < 256) {
      op(kBinPut);
      bytes_.push_back(static_cast<uint8_t>(i));
    } else {
      op(kLongBinPut);
      append_le<uint32_t>(&bytes_, i);
    }
  }

 private:
  std::vector<uint8_t> bytes_;
  std::unordered_map<std::string, uint32_t> memo_;
};

// Strict UTF-8 (what Python's str decode accepts, minus the surrogates that only
// "surrogatepass" lets through, which no tensor name needs).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    size_t n = c < 0x80             ? 0
               : (c & 0xe0) == 0xc0 ? 1
               : (c & 0xf0) == 0xe0 ? 2
               : (c & 0xf8) == 0xf0 ? 3
                                    : 4;
    if (n == 4 || s.size() - i - 1 < n) return false;
    uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

bool torch_has_typed_storage(DType dtype) {
  return dtype != DType::kF8E4M3FN && dtype != DType::kF8E5M2;
}

Result<std::vector<uint8_t>> write_torch_pickle(std::span<const PickledTensor> tensors) {
  struct StorageDecl {
    DType dtype;
    uint64_t numel;
  };
  std::unordered_map<std::string, StorageDecl> storages;
  std::unordered_set<std::string> names;
  for (const PickledTensor& t : tensors) {
    const std::string what = "torch pickle: tensor '" + t.name + "'";
    if (!names.insert(t.name).second) return invalid_argument(what + " appears twice");
    if (!valid_utf8(t.name)) return invalid_argument(what + ": name is not UTF-8");
    if (t.storage_key.empty() || !valid_utf8(t.storage_key)) {
      return invalid_argument(what + ": storage key is empty or not UTF-8");
    }
    if (t.shape.size() != t.stride.size() || t.shape.size() > kMaxRank) {
      return invalid_argument(what + ": rank " + std::to_string(t.shape.size()) + " with " +
                              std::to_string(t.stride.size()) + " strides (max rank 64)");
    }
    bool negative =
        t.storage_offset < 0 || t.storage_numel > (uint64_t{1} << 62) / dtype_size(t.dtype);
    for (size_t d = 0; d < t.shape.size(); ++d) negative |= t.shape[d] < 0 || t.stride[d] < 0;
    if (negative)
      return invalid_argument(what + ": negative size, stride or offset, or huge numel");
    auto [it, fresh] = storages.emplace(t.storage_key, StorageDecl{t.dtype, t.storage_numel});
    if (!fresh && (it->second.dtype != t.dtype || it->second.numel != t.storage_numel)) {
      return invalid_argument(what + ": storage '" + t.storage_key +
                              "' is used with two different dtypes or numels");
    }
  }

  PickleOut out;
  out.op(kProto);
  out.op(2);
  out.op(kEmptyDict);
  for (size_t batch = 0; batch < tensors.size(); batch += kBatchSize) {
    const size_t n = std::min(kBatchSize, tensors.size() - batch);
    if (n > 1) out.op(kMark);
    for (size_t i = batch; i < batch + n; ++i) {
      const PickledTensor& t = tensors[i];
      out.string(t.name);
      // Keys that are the same view of the same storage (the exact duplicates of a shared-
      // expert adapter) share one tensor object: the first is memoised, the rest are a BINGET.
      // This keeps the per-alias cost at its name plus a few bytes.
      std::string identity = "t" + t.storage_key + "|" + std::to_string(t.storage_offset);
      for (int64_t d : t.shape) identity += "," + std::to_string(d);
      identity += "|";
      for (int64_t d : t.stride) identity += "," + std::to_string(d);
      out.memoised(identity, [&] {
        const bool typed = torch_has_typed_storage(t.dtype);
        out.memo_global("torch._utils", typed ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
        out.op(kMark);
        out.op(kMark);  // the persistent id tuple
        out.memo_string("storage");
        if (typed) {
          out.memo_global("torch", dtype_info(t.dtype).torch_storage);
        } else {
          out.memo_global("torch.storage", "UntypedStorage");
        }
        out.memo_string(t.storage_key);
        out.memo_string("cpu");
        out.integer(
            static_cast<int64_t>(typed ? t.storage_numel : t.storage_numel * dtype_size(t.dtype)));
        out.op(kTuple);
        out.op(kBinPersId);
        out.integer(t.storage_offset);
        out.int_tuple(t.shape);
        out.int_tuple(t.stride);
        out.op(kNewFalse);                              // requires_grad
        out.memo_global("collections", "OrderedDict");  // backward_hooks = OrderedDict()
        out.op(kEmptyTuple);
        out.op(kReduce);
        if (!typed) {
          const auto [module, name] = dtype_global(t.dtype);
          out.memo_global(module, name);
        }
        out.op(kTuple);
        out.op(kReduce);
      });
    }
    out.op(n > 1 ? kSetItems : kSetItem);
  }
  out.op(kStop);
  return out.take();
}

// ---------------------------------------------------------------------------------------------
// Restricted reader

namespace {

// clang-format off
enum class Kind : uint8_t {
  kNone, kBool, kInt, kString, kTuple, kDict, kGlobal, kStorage, kTensor
};
// The allowed globals: what each one is.
enum class Callable : uint8_t {
  kRebuildV2, kRebuildV3, kOrderedDict, kTypedStorage, kUntypedStorage, kDType
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

const char* op_name(uint8_t op) {
  // clang-format off
  static constexpr std::pair<uint8_t, const char*> kNames[] = {
      {kMark, "MARK"}, {kStop, "STOP"}, {kBinInt, "BININT"}, {kBinInt1, "BININT1"},
      {kBinInt2, "BININT2"}, {kNone, "NONE"}, {kBinPersId, "BINPERSID"}, {kReduce, "REDUCE"},
      {kBinUnicode, "BINUNICODE"}, {kBuild, "BUILD"}, {kGlobal, "GLOBAL"}, {kBinGet, "BINGET"},
      {kLongBinGet, "LONG_BINGET"}, {kBinPut, "BINPUT"}, {kLongBinPut, "LONG_BINPUT"},
      {kSetItem, "SETITEM"}, {kTuple, "TUPLE"}, {kSetItems, "SETITEMS"},
      {kEmptyDict, "EMPTY_DICT"}, {kEmptyTuple, "EMPTY_TUPLE"}, {kProto, "PROTO"},
      {kTuple1, "TUPLE1"}, {kTuple2, "TUPLE2"}, {kTuple3, "TUPLE3"}, {kNewTrue, "NEWTRUE"},
      {kNewFalse, "NEWFALSE"}, {kLong1, "LONG1"},
  };
  // clang-format on
  for (const auto& [code, name] : kNames) {
    if (code == op) return name;
  }
  return nullptr;
}

std::string hex_byte(uint8_t v) {
  char buf[5];
  std::snprintf(buf, sizeof(buf), "0x%02x", v);
  return buf;
}

// For messages: at most 80 bytes, non-printable bytes as '?'.
std::string printable(std::string_view s) {
  std::string out(s.substr(0, 80));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return s.size() > 80 ? out + "..." : out;
}

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

Status Unpickler::step() {
  switch (op_) {
    case kProto: {
      const uint8_t* v = nullptr;
      RETURN_IF_ERROR(read(1, &v));
      if (op_at_ != 0 || (*v != 2 && *v != 3)) {
        return err("unsupported protocol " + std::to_string(*v) + " (torch.save writes 2)");
      }
      return ok_status();
    }
    case kEmptyDict:
      return push_dict(false);
    case kEmptyTuple:
      return push_tuple({});
    case kMark:
      if (marks_.size() >= limits_.max_mark_depth) {
        return limit("MARKs nested deeper than the limit");
      }
      marks_.push_back(stack_.size());
      return ok_status();
    case kBinUnicode: {
      uint32_t n = 0;
      RETURN_IF_ERROR(read_le(&n));
      if (n > limits_.max_string_bytes) return limit("string of " + std::to_string(n) + " bytes");
      const uint8_t* p = nullptr;
      RETURN_IF_ERROR(read(n, &p));
      std::string s(reinterpret_cast<const char*>(p), n);
      if (!valid_utf8(s)) return err("string is not valid UTF-8");
      strings_.push_back(std::move(s));
      return push(Val{.kind = Kind::kString, .ref = static_cast<uint32_t>(strings_.size() - 1)});
    }
    case kBinPut:
    case kBinGet: {
      const uint8_t* p = nullptr;
      RETURN_IF_ERROR(read(1, &p));
      return op_ == kBinPut ? memo_put(*p) : memo_get(*p);
    }
    case kLongBinPut:
    case kLongBinGet: {
      uint32_t i = 0;
      RETURN_IF_ERROR(read_le(&i));
      return op_ == kLongBinPut ? memo_put(i) : memo_get(i);
    }
    case kGlobal:
      return global();
    case kBinPersId:
      return persistent_id();
    case kBinInt: {
      int32_t v = 0;
      RETURN_IF_ERROR(read_le(&v));
      return push_int(v);
    }
    case kBinInt1: {
      uint8_t v = 0;
      RETURN_IF_ERROR(read_le(&v));
      return push_int(v);
    }
    case kBinInt2: {
      uint16_t v = 0;
      RETURN_IF_ERROR(read_le(&v));
      return push_int(v);
    }
    case kLong1: {
      uint8_t n = 0;
      const uint8_t* p = nullptr;
      RETURN_IF_ERROR(read_le(&n));
      RETURN_IF_ERROR(read(n, &p));
      if (n > 8) return err("LONG1 integer of " + std::to_string(n) + " bytes exceeds 64 bits");
      uint64_t v = (n > 0 && (p[n - 1] & 0x80)) ? ~uint64_t{0} : 0;  // sign extension
      for (size_t i = 0; i < n; ++i) {
        v = (v & ~(uint64_t{0xff} << (8 * i))) | (uint64_t{p[i]} << (8 * i));
      }
      return push_int(static_cast<int64_t>(v));
    }
    case kTuple: {
      std::vector<Val> items;
      RETURN_IF_ERROR(pop_mark(&items));
      return push_tuple(std::move(items));
    }
    case kTuple1:
    case kTuple2:
    case kTuple3: {
      const size_t n = op_ - kTuple1 + 1;
      if (stack_.size() - base() < n) return err("stack underflow");
      std::vector<Val> items(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
      stack_.resize(stack_.size() - n);
      return push_tuple(std::move(items));
    }
    case kNewTrue:
    case kNewFalse:
      return push(Val{.kind = Kind::kBool, .num = op_ == kNewTrue});
    case kNone:
      return push(Val{});
    case kReduce:
      return reduce();
    case kSetItem: {
      Val kv[2];
      Val* dict = nullptr;
      RETURN_IF_ERROR(pop(&kv[1]));
      RETURN_IF_ERROR(pop(&kv[0]));
      RETURN_IF_ERROR(top(&dict));
      return add_items(*dict, kv);
    }
    case kSetItems: {
      std::vector<Val> kv;
      Val* dict = nullptr;
      RETURN_IF_ERROR(pop_mark(&kv));
      if (kv.size() % 2 != 0) return err("odd number of SETITEMS values");
      RETURN_IF_ERROR(top(&dict));
      return add_items(*dict, kv);
    }
    case kBuild: {
      // Only a state_dict's OrderedDict with its attribute dict (`_metadata`), which we drop.
      Val state;
      Val* inst = nullptr;
      RETURN_IF_ERROR(pop(&state));
      RETURN_IF_ERROR(top(&inst));
      if (inst->kind != Kind::kDict || !dicts_[inst->ref].ordered || state.kind != Kind::kDict) {
        return err("BUILD of something other than an OrderedDict's attributes");
      }
      return ok_status();
    }
    default:
      return data_loss("torch pickle: unsupported opcode " + hex_byte(op_) + " at offset " +
                       std::to_string(op_at_));
  }
}

Status Unpickler::global() {
  std::string_view module, name;
  RETURN_IF_ERROR(read_line(&module));
  RETURN_IF_ERROR(read_line(&name));
  Val v{.kind = Kind::kGlobal};
  bool known = false;
  if (module == "torch._utils" && (name == "_rebuild_tensor_v2" || name == "_rebuild_tensor_v3")) {
    v.callable = name.back() == '2' ? Callable::kRebuildV2 : Callable::kRebuildV3;
    known = true;
  } else if (module == "collections" && name == "OrderedDict") {
    v.callable = Callable::kOrderedDict;
    known = true;
  } else if (module == "torch.storage" && name == "UntypedStorage") {
    v.callable = Callable::kUntypedStorage;
    known = true;
  } else if (module == "torch") {
    for (const DTypeInfo& info : all_dtypes()) {
      if (torch_has_typed_storage(info.dtype) && name == info.torch_storage) {
        v.callable = Callable::kTypedStorage;
      } else if (info.torch.substr(6) == name) {
        v.callable = Callable::kDType;
      } else {
        continue;
      }
      v.dtype = info.dtype;
      known = true;
      break;
    }
  }
  if (!known) {
    return err("forbidden global '" + printable(module) + "." + printable(name) + "'");
  }
  return push(v);
}

Status Unpickler::persistent_id() {
  Val pid;
  RETURN_IF_ERROR(pop(&pid));
  const std::vector<Val>* t = pid.kind == Kind::kTuple ? &tuples_[pid.ref] : nullptr;
  const auto is = [&](size_t i, Kind k) { return (*t)[i].kind == k; };
  if (t == nullptr || t->size() != 5 || !is(0, Kind::kString) ||
      strings_[(*t)[0].ref] != "storage" || !is(1, Kind::kGlobal) ||
      ((*t)[1].callable != Callable::kTypedStorage &&
       (*t)[1].callable != Callable::kUntypedStorage) ||
      !is(2, Kind::kString) || strings_[(*t)[2].ref].empty() || !is(3, Kind::kString) ||
      !is(4, Kind::kInt) || (*t)[4].num < 0) {
    return err("persistent id is not ('storage', <storage class>, key, location, numel)");
  }
  Storage s;
  s.key = strings_[(*t)[2].ref];
  s.typed = (*t)[1].callable == Callable::kTypedStorage;
  s.dtype = (*t)[1].dtype;
  s.numel = static_cast<uint64_t>((*t)[4].num);
  if (s.numel > (uint64_t{1} << 62) / (s.typed ? dtype_size(s.dtype) : 1)) {
    return err("storage '" + printable(s.key) + "' is larger than 2^62 bytes");
  }
  auto [it, fresh] = storage_by_key_.emplace(s.key, static_cast<uint32_t>(storages_.size()));
  if (fresh) {
    storages_.push_back(std::move(s));
  } else {
    const Storage& seen = storages_[it->second];
    if (seen.typed != s.typed || (s.typed && seen.dtype != s.dtype) || seen.numel != s.numel) {
      return err("storage '" + printable(s.key) + "' declared twice with different type or numel");
    }
  }
  return push(Val{.kind = Kind::kStorage, .ref = it->second});
}

Status Unpickler::reduce() {
  Val args;
  Val* callable = nullptr;
  RETURN_IF_ERROR(pop(&args));
  RETURN_IF_ERROR(top(&callable));
  if (args.kind != Kind::kTuple) return err("REDUCE arguments are not a tuple");
  const std::vector<Val> a = tuples_[args.ref];  // copy: the tables may grow below
  if (callable->kind == Kind::kGlobal && callable->callable == Callable::kOrderedDict) {
    if (!a.empty()) return err("OrderedDict() with arguments");
    stack_.pop_back();
    return push_dict(true);
  }
  if (callable->kind == Kind::kGlobal &&
      (callable->callable == Callable::kRebuildV2 || callable->callable == Callable::kRebuildV3)) {
    return rebuild_tensor(callable->callable == Callable::kRebuildV3, a, callable);
  }
  return err("REDUCE of something that is not a tensor rebuild or OrderedDict");
}

Status Unpickler::rebuild_tensor(bool v3, const std::vector<Val>& a, Val* result) {
  const std::string fn = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
  const size_t n = v3 ? 7 : 6;  // plus an optional metadata dict, written only when non-empty
  if (a.size() != n && a.size() != n + 1) {
    return err(fn + " with " + std::to_string(a.size()) + " arguments");
  }
  const auto int_tuple = [&](const Val& v, std::vector<int64_t>* out) {
    if (v.kind != Kind::kTuple || tuples_[v.ref].size() > limits_.max_rank) return false;
    for (const Val& x : tuples_[v.ref]) {
      if (x.kind != Kind::kInt || x.num < 0) return false;
      out->push_back(x.num);
    }
    return true;
  };
  const auto empty_dict = [&](const Val& v) {
    return v.kind == Kind::kDict && dicts_[v.ref].items.empty();
  };
  PickledTensor t;
  if (a[0].kind != Kind::kStorage || a[1].kind != Kind::kInt || a[1].num < 0 ||
      !int_tuple(a[2], &t.shape) || !int_tuple(a[3], &t.stride) ||
      t.shape.size() != t.stride.size() || a[4].kind != Kind::kBool || !empty_dict(a[5]) ||
      (v3 && (a[6].kind != Kind::kGlobal || a[6].callable != Callable::kDType))) {
    return err(fn + " arguments are not (storage, offset, size, stride, requires_grad, " +
               "OrderedDict()" + (v3 ? ", dtype)" : ")") +
               " with non-negative integers and sizes and strides of one rank");
  }
  if (a.size() == n + 1 && !empty_dict(a[n])) {
    return err(fn + " with tensor metadata (conjugate/negative bits), which is not supported");
  }
  Storage& s = storages_[a[0].ref];
  t.dtype = v3 ? a[6].dtype : s.dtype;
  t.storage_numel = s.numel;
  if (!s.typed) {
    if (!v3) return err(fn + " of an UntypedStorage");
    if (s.numel % dtype_size(t.dtype) != 0) {
      return err("storage '" + printable(s.key) + "' of " + std::to_string(s.numel) +
                 " bytes is not a whole number of " + std::string(dtype_name(t.dtype)));
    }
    t.storage_numel = s.numel / dtype_size(t.dtype);
  } else if (s.dtype != t.dtype) {
    return err(fn + " views a " + std::string(dtype_name(s.dtype)) + " storage as " +
               std::string(dtype_name(t.dtype)));
  }
  if (s.viewed && s.view_dtype != t.dtype) {
    return err("storage '" + printable(s.key) + "' is viewed as both " +
               std::string(dtype_name(s.view_dtype)) + " and " + std::string(dtype_name(t.dtype)));
  }
  s.viewed = true;
  s.view_dtype = t.dtype;
  t.storage_key = s.key;
  t.storage_offset = a[1].num;
  if (tensors_.size() >= limits_.max_tensors) return limit("more tensors than the limit");
  tensors_.push_back(std::move(t));
  *result = Val{.kind = Kind::kTensor, .ref = static_cast<uint32_t>(tensors_.size() - 1)};
  return ok_status();
}

Result<std::vector<PickledTensor>> Unpickler::finish() {
  if (!marks_.empty() || stack_.size() != 1) {
    return err("STOP with " + std::to_string(stack_.size()) + " values and " +
               std::to_string(marks_.size()) + " open MARKs on the stack (want one value)");
  }
  if (pos_ != in_.size()) {
    return err(std::to_string(in_.size() - pos_) + " trailing bytes after STOP");
  }
  const Val root = stack_.back();
  if (root.kind != Kind::kDict) return err("top-level object is not a dict");
  std::vector<PickledTensor> out;
  std::unordered_set<std::string_view> names;
  out.reserve(dicts_[root.ref].items.size());
  for (const auto& [k, v] : dicts_[root.ref].items) {
    if (k.kind != Kind::kString || v.kind != Kind::kTensor) {
      return err("top-level dict has an entry that is not str -> tensor");
    }
    const std::string& name = strings_[k.ref];
    if (!names.insert(name).second) return err("duplicate key '" + printable(name) + "'");
    out.push_back(tensors_[v.ref]);
    out.back().name = name;
  }
  return out;
}

}  // namespace

Result<std::vector<PickledTensor>> read_torch_pickle(std::span<const uint8_t> pickle,
                                                     const TorchPickleLimits& limits) {
  return Unpickler(pickle, limits).run();
}

}  // namespace weightcast
