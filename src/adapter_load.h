// Loading a published adapter (either format) into memory the way an engine must use it:
// every public key gets its own destination storage, so scaling one alias in place (engines
// scale LoRA B) can never change another key, even when the file shares one storage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_bytes.h"
#include "src/adapter_publish.h"

namespace weightcast {

class ThreadPool;

struct LoadedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // owned, contiguous row-major
};

struct LoadedAdapter {
  AdapterFormat format = AdapterFormat::kSafetensors;
  std::string model_path;
  std::string config_json;  // empty when loading a bare model file
  std::vector<LoadedTensor> tensors;
  uint64_t file_storages = 0;  // storages in the file (unique tensors for safetensors)
  uint64_t file_bytes = 0;
};

struct AdapterLoadOptions {
  bool to_bf16 = false;  // convert f32/f16/f64 keys to bf16 (round to nearest even)
};

// Which model file of `dir` is committed: the only one present, or, when both formats are
// present (a publication was interrupted), the one the marker names.
Result<std::string> committed_adapter_file(const std::string& dir);

// `path` is an adapter directory or a model file (.bin torch zip or .safetensors; the format
// is recognised by content). Errors name the file and what is wrong with it.
Result<LoadedAdapter> load_adapter(const std::string& path, const AdapterLoadOptions& options = {});

// Whether a file's bytes are a zip archive (a torch.save artifact) rather than safetensors.
bool looks_like_zip(std::span<const uint8_t> bytes);

}  // namespace weightcast
