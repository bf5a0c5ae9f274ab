// `weightcast fp8 quantize`: a model's safetensors (one file or an index of shards) rewritten
// as a block-FP8 checkpoint for FP8 engines: the selected 2-D weights as float8_e4m3fn with a
// `<name>_scale_inv` fp32 grid beside each (codec/fp8_quantize.h), every other tensor as it
// was, and a config.json carrying the `quantization_config` FP8 checkpoints carry
// ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
// "weight_block_size": [128, 128]}), merged into the model's own config.json when one lies
// beside --from.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

struct Fp8ExportOptions {
  std::string from;     // MODEL.safetensors or model.safetensors.index.json
  std::string out_dir;  // created if missing; model.safetensors and config.json go there
  std::vector<std::string> patterns;  // codec/fp8_selection.h; empty: kFp8DefaultPattern
  std::function<void(const std::string&)> log;
};

struct Fp8ExportReport {
  std::vector<std::string> quantised;  // tensor names, sorted
  size_t kept = 0;                     // tensors copied as they are
  uint64_t bytes_in = 0, bytes_out = 0;
  std::string model_file, config_file;
};

// Quantises and writes; every output goes through UserFileWriter (atomic replace, never over
// an input). A selected tensor that is not a 2-D bf16, fp16 or fp32 matrix is refused naming
// it, as is a pattern that is not a valid regex or selects nothing.
Result<Fp8ExportReport> export_fp8_checkpoint(const Fp8ExportOptions& options);

}  // namespace weightcast
