// A model as Hugging Face stores it: one safetensors file, or shards named by a
// `model.safetensors.index.json` ({"weight_map": {tensor: shard file}}). Reading maps the files
// and gives one view per tensor, sorted by name (the order the journal publishes in, the same
// for every version of a model); writing produces one safetensors file atomically.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/base/file_io.h"
#include "codec/base/status.h"
#include "codec/tensor_bytes.h"
#include "transport/user_file_writer.h"

namespace weightcast {

struct ModelFiles {
  std::vector<MappedFile> files;
  std::vector<TensorBytesView> tensors;  // sorted by name; bytes point into `files`
  uint64_t total_bytes = 0;
};

// `path` ends in .json (an index of shards next to it) or is a safetensors file. Errors name
// the file and the tensor: an index naming a tensor its shard lacks, a tensor in two shards,
// shard paths leaving the index's directory, invalid safetensors.
Result<std::unique_ptr<ModelFiles>> read_model_files(const std::string& path);

// Writes `tensors` as one safetensors file at `path` through UserFileWriter (by default an
// atomic replace that follows symlinks and keeps the mode; refuses an output that is one of
// `options.inputs` or lies inside a journal).
Status write_model_file(const std::string& path, std::span<const TensorBytesView> tensors,
                        const UserFileOptions& options = {});

}  // namespace weightcast
