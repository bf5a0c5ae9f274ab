// The data.pkl of a torch.save artifact: a pickle (protocol 2) of a dict {name: tensor}, each
// tensor exactly as torch/_tensor.py's __reduce_ex__ reduces a dense CPU tensor:
//
//   torch._utils._rebuild_tensor_v2(
//       persistent_load(('storage', torch.FloatStorage, '<key>', 'cpu', <storage numel>)),
//       storage_offset, (size...), (stride...), False, collections.OrderedDict())
//
// Dtypes without a legacy typed storage class (float8) use the form torch >= 2.1 writes:
//
//   torch._utils._rebuild_tensor_v3(
//       persistent_load(('storage', torch.storage.UntypedStorage, '<key>', 'cpu', <bytes>)),
//       storage_offset, (size...), (stride...), False, collections.OrderedDict(),
//       torch.float8_e4m3fn)
//
// Tensors sharing a storage key share one storage after torch.load (its loaded_storages map
// is keyed by the key string). The writer uses only opcodes that torch 1.13's weights_only
// unpickler implements (no FRAME, no SHORT_BINUNICODE: protocol 2, as torch.save).
//
// The reader is a restricted unpickler that never executes anything: a small stack machine
// that knows the opcodes above plus what Python's pickler emits around them (MARK, memo
// BINPUT/BINGET and their LONG_ forms, BININT/BININT1/BININT2/LONG1, TUPLE/TUPLE1-3,
// EMPTY_TUPLE, EMPTY_DICT, SETITEM(S), NEWTRUE/NEWFALSE/NONE, and BUILD for the `_metadata`
// attribute of a state_dict's OrderedDict, which it drops) and only the globals
// torch._utils._rebuild_tensor_v2/_v3, collections.OrderedDict, torch.<X>Storage for the
// dtypes of codec/dtype.h that have one, torch.storage.UntypedStorage and torch.<dtype>, plus
// torch._utils._rebuild_parameter(_with_state) in the form a plain nn.Parameter takes (its
// value is its data tensor). Any
// other opcode is a data_loss error naming it in hex with its byte offset; any other global,
// one naming the global and its offset. Protocol 2 (or 3, identical for these opcodes) only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"

namespace weightcast {

// One entry of the pickled dict.
struct PickledTensor {
  std::string name;            // dict key
  std::string storage_key;     // the archive record is <archive>/data/<storage_key>
  DType dtype = DType::kF32;   // element type of the storage and the tensor
  uint64_t storage_numel = 0;  // elements of dtype in the storage
  int64_t storage_offset = 0;  // in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  // in elements
};

// Whether torch has a legacy typed storage class (torch.<X>Storage) for `dtype`; the float8
// types do not (codec/dtype.h's names for them are not torch classes), so they are written
// with _rebuild_tensor_v3 and an UntypedStorage.
bool torch_has_typed_storage(DType dtype);

// Serialises the dict in the given order. Fails (invalid_argument) on duplicate names, names
// or keys that are not UTF-8, rank above 64, shape/stride rank mismatch, or a storage key used
// with two dtypes or two numels. Bounds of views against storages are the caller's business
// (torch_artifact checks them).
Result<std::vector<uint8_t>> write_torch_pickle(std::span<const PickledTensor> tensors);

struct TorchPickleLimits {
  size_t max_pickle_bytes = size_t{256} << 20;
  size_t max_stack_depth = 4096;              // values on the stack, all MARK levels together
  size_t max_mark_depth = 64;                 // nested MARKs
  size_t max_memo_entries = size_t{1} << 24;  // torch.save puts ~10 per tensor
  size_t max_string_bytes = 65536;            // one BINUNICODE / GLOBAL line
  size_t max_tensors = size_t{1} << 20;
  size_t max_rank = 64;
};

// Runs the restricted unpickler over a whole data.pkl. The top-level object must be a dict
// (plain, or collections.OrderedDict) whose keys are strings and whose values are tensors.
// Returns the tensors in dict order. Errors are data_loss (out_of_range for limits).
Result<std::vector<PickledTensor>> read_torch_pickle(std::span<const uint8_t> pickle,
                                                     const TorchPickleLimits& limits = {});

}  // namespace weightcast
