#include "src/adapter_load.h"

#include <cstring>
#include <filesystem>

#include "codec/base/file_io.h"
#include "codec/float_convert.h"
#include "src/adapter_inputs.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;

Result<uint16_t> to_bf16_bits(const uint8_t* p, DType dtype) {
  float f = 0;
  switch (dtype) {
    case DType::kF32:
      std::memcpy(&f, p, 4);
      break;
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      f = static_cast<float>(d);
      break;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      f = half_to_float(h);
      break;
    }
    default:
      return internal_error("no bf16 conversion");
  }
  return float_to_bf16(f);
}

bool converts_to_bf16(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16;
}

// A fresh, owned copy of one key, converted to bf16 when asked.
Result<LoadedTensor> materialise(const TensorBytesView& v, bool to_bf16) {
  LoadedTensor t{v.name, v.dtype, v.shape, {}};
  if (!to_bf16 || !converts_to_bf16(v.dtype)) {
    t.bytes.assign(v.bytes.begin(), v.bytes.end());
    return t;
  }
  const size_t es = dtype_size(v.dtype);
  const size_t numel = v.bytes.size() / es;
  t.dtype = DType::kBF16;
  t.bytes.resize(numel * 2);
  for (size_t k = 0; k < numel; ++k) {
    ASSIGN_OR_RETURN(const uint16_t b, to_bf16_bits(v.bytes.data() + k * es, v.dtype));
    std::memcpy(t.bytes.data() + 2 * k, &b, 2);
  }
  return t;
}

}  // namespace

bool looks_like_zip(std::span<const uint8_t> bytes) {
  return bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4;
}

Result<std::string> committed_adapter_file(const std::string& dir) {
  const std::string bin = (fs::path(dir) / kAdapterBinFile).string();
  const std::string st = (fs::path(dir) / kAdapterSafetensorsFile).string();
  const bool has_bin = fs::exists(bin), has_st = fs::exists(st);
  if (has_bin != has_st) return has_bin ? bin : st;
  if (!has_bin) {
    return not_found("'" + dir + "' holds neither " + kAdapterBinFile + " nor " +
                     kAdapterSafetensorsFile);
  }
  auto marker = read_whole_file((fs::path(dir) / kAdapterMarkerFile).string(), 4096);
  const std::string named = marker.ok() ? std::string(marker->begin(), marker->end()) : "";
  if (named == kAdapterBinFile) return bin;
  if (named == kAdapterSafetensorsFile) return st;
  return data_loss("'" + dir + "' holds both " + kAdapterBinFile + " and " +
                   kAdapterSafetensorsFile + " but no marker (" + kAdapterMarkerFile +
                   ") says which is committed");
}

Result<LoadedAdapter> load_adapter(const std::string& path, const AdapterLoadOptions& o) {
  LoadedAdapter out;
  std::string model = path;
  if (fs::is_directory(path)) {
    ASSIGN_OR_RETURN(model, committed_adapter_file(path));
    auto config = read_whole_file((fs::path(path) / kAdapterConfigFile).string(), 1 << 24);
    if (!config.ok()) return config.status().with_context("adapter '" + path + "'");
    out.config_json.assign(config->begin(), config->end());
  }
  ASSIGN_OR_RETURN(const auto input, read_adapter_input(model));
  out.model_path = model;
  out.format = input->torch_format ? AdapterFormat::kTorchCompact : AdapterFormat::kSafetensors;
  out.file_storages = input->file_storages;
  out.file_bytes = input->file.bytes().size();
  out.tensors.reserve(input->tensors.size());
  for (const auto& v : input->tensors) {
    ASSIGN_OR_RETURN(LoadedTensor t, materialise(v, o.to_bf16));
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace weightcast
