// The torch pickle writer: data.pkl for a dict of tensors, as torch.save pickles it.
#include "codec/formats/torch_pickle.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/formats/pickle_opcodes.h"

namespace weightcast {

using enum pickle_internal::Op;
using pickle_internal::valid_utf8;

namespace {

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

}  // namespace

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

}  // namespace weightcast
