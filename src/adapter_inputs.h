// Reading an adapter's tensors as views for publication: from a safetensors file, or from a
// torch.save'd dict of tensors (which may share storage). Contiguous views point into the
// mapped file; only strided views are copied.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codec/base/file_io.h"
#include "codec/base/status.h"
#include "codec/tensor_bytes.h"

namespace weightcast {

struct AdapterInput {
  MappedFile file;
  std::vector<std::vector<uint8_t>> copies;  // strided views, materialised
  std::vector<TensorBytesView> tensors;
  bool torch_format = false;
  uint64_t file_storages = 0;
};

Result<std::unique_ptr<AdapterInput>> read_adapter_input(const std::string& path);

}  // namespace weightcast
