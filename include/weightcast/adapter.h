// Publishing a LoRA adapter compactly, the way engines load it (PEFT layout: a model file and
// adapter_config.json in one directory), and loading one back. Exact duplicates (same dtype,
// shape and bytes) are stored once: as `adapter_model.bin`, a torch.save zip whose aliases
// share one storage, when the unique bytes are under half the logical bytes, else as
// `adapter_model.safetensors`. Publication is crash safe (temp + fsync + rename, a commit
// marker); a reader never sees a mix of two publications. docs/DECISIONS.md "Compact adapter
// publication".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weightcast/status.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

struct AdapterReport {
  std::string format;      // "torch-compact" or "safetensors"
  std::string model_path;  // the model file written
  uint64_t keys = 0;
  uint64_t logical_bytes = 0;  // of every key
  uint64_t unique_storages = 0;
  uint64_t unique_bytes = 0;  // of the storages written
  uint64_t file_bytes = 0;
};

// Publishes `tensors` (contiguous host memory, unique names, at least one) into `dir`
// (created if missing) with `config_json` as adapter_config.json. Errors name the file or
// tensor at fault; on error `dir` still holds the previous adapter.
Result<AdapterReport> publish_adapter(const std::string& dir, const std::vector<TensorRef>& tensors,
                                      const std::string& config_json, size_t threads = 0);

struct LoadedAdapterTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // its own storage, contiguous row-major
};

struct LoadedAdapter {
  std::string format;
  std::string model_path;
  std::string config_json;  // empty for a bare model file
  std::vector<LoadedAdapterTensor> tensors;
  uint64_t file_bytes = 0;
};

// Loads an adapter directory or a model file (either format, recognised by content; nothing
// in it is executed). Every key gets its own storage, so scaling one alias in place never
// changes another. `to_bf16` converts f16/f32/f64 keys to bf16 (round to nearest even).
Result<LoadedAdapter> load_adapter(const std::string& path, bool to_bf16 = false);

}  // namespace weightcast::api
