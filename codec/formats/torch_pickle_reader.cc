// The restricted torch pickle reader: runs data.pkl on a stack machine that never executes
// anything and knows only the opcodes and globals torch.save uses for a dict of tensors.
#include "codec/formats/torch_pickle.h"

#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "codec/formats/pickle_opcodes.h"
#include "codec/formats/torch_unpickler.h"

namespace weightcast {
namespace pickle_internal {

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

namespace {

// For messages: at most 80 bytes, non-printable bytes as '?'.
std::string printable(std::string_view s) {
  std::string out(s.substr(0, 80));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return s.size() > 80 ? out + "..." : out;
}

}  // namespace

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
  } else if (module == "torch._utils" &&
             (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state")) {
    v.callable = name == "_rebuild_parameter" ? Callable::kRebuildParameter
                                              : Callable::kRebuildParameterWithState;
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
  if (callable->kind == Kind::kGlobal &&
      (callable->callable == Callable::kRebuildParameter ||
       callable->callable == Callable::kRebuildParameterWithState)) {
    return rebuild_parameter(callable->callable == Callable::kRebuildParameterWithState, a,
                             callable);
  }
  return err("REDUCE of something that is not a tensor rebuild or OrderedDict");
}

// An nn.Parameter: torch pickles it as _rebuild_parameter(data, requires_grad, OrderedDict()),
// or _rebuild_parameter_with_state(..., state) when the Parameter carries Python attributes.
// Only what a plain Parameter writes is accepted (the hooks are never saved, so they are an
// empty OrderedDict; the state, when present, is empty), and it reads as its data tensor:
// requires_grad is training state, not weights.
Status Unpickler::rebuild_parameter(bool with_state, const std::vector<Val>& a, Val* result) {
  const std::string fn = with_state ? "_rebuild_parameter_with_state" : "_rebuild_parameter";
  const size_t n = with_state ? 4 : 3;
  if (a.size() != n) return err(fn + " with " + std::to_string(a.size()) + " arguments");
  if (a[0].kind != Kind::kTensor || a[1].kind != Kind::kBool) {
    return err(fn + " arguments are not (rebuilt tensor, requires_grad bool, OrderedDict()" +
               (with_state ? ", state)" : ")"));
  }
  if (a[2].kind != Kind::kDict || !dicts_[a[2].ref].ordered || !dicts_[a[2].ref].items.empty()) {
    return err(fn + " with backward hooks that are not an empty OrderedDict()");
  }
  if (with_state && a[3].kind != Kind::kNone &&
      (a[3].kind != Kind::kDict || !dicts_[a[3].ref].items.empty())) {
    return err(fn + " with Parameter attributes (state), which are not supported");
  }
  *result = a[0];
  return ok_status();
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

}  // namespace pickle_internal

using pickle_internal::Unpickler;

Result<std::vector<PickledTensor>> read_torch_pickle(std::span<const uint8_t> pickle,
                                                     const TorchPickleLimits& limits) {
  return Unpickler(pickle, limits).run();
}

}  // namespace weightcast
