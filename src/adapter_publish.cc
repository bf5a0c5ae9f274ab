#include "src/adapter_publish.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "codec/base/file_io.h"
#include "codec/base/thread_pool.h"
#include "codec/formats/safetensors_format.h"
#include "codec/formats/torch_artifact.h"
#include "transport/user_file_writer.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string join(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

UserFileOptions replace(const std::vector<std::string>& inputs) {
  return {UserWriteMode::kAtomicReplace, inputs};
}

Status write_text(const std::string& path, std::string_view text,
                  const std::vector<std::string>& inputs) {
  return write_user_file(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                         replace(inputs));
}

// One storage per unique tensor (named by its index, as torch.save names storages), every
// key a full view of its storage.
Status write_compact_file(const std::string& path, std::span<const TensorBytesView> tensors,
                          const DedupResult& dedup, const std::vector<std::string>& inputs) {
  std::vector<TorchStorage> storages;
  storages.reserve(dedup.representative.size());
  for (size_t s = 0; s < dedup.representative.size(); ++s) {
    const TensorBytesView& t = tensors[dedup.representative[s]];
    storages.push_back({std::to_string(s), t.dtype, t.bytes});
  }
  std::vector<TorchTensorRef> refs;
  refs.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    TorchTensorRef r;
    r.name = tensors[i].name;
    r.storage = dedup.storage_of[i];
    r.storage_offset = 0;
    r.shape = tensors[i].shape;
    r.stride.assign(r.shape.size(), 1);
    for (size_t d = r.shape.size(); d-- > 1;) r.stride[d - 1] = r.stride[d] * r.shape[d];
    refs.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(UserFileWriter out, UserFileWriter::create(path, replace(inputs)));
  RETURN_IF_ERROR(write_torch_artifact("adapter_model", storages, refs, out.sink()));
  return out.commit();
}

std::string read_marker(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string name((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return name;
}

// Temporary files of publications that were killed (".<name>.tmp.<pid>"); one publisher
// per directory at a time is the contract, so none of them is still being written.
Status remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") && name.find(".tmp.") != std::string::npos) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
  if (ec) return io_error("cannot clean temporary files in '" + dir + "': " + ec.message());
  return ok_status();
}

Status check_unique_names(std::span<const TensorBytesView> tensors) {
  std::map<std::string_view, size_t> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!seen.emplace(tensors[i].name, i).second) {
      return invalid_argument("adapter key '" + tensors[i].name + "' appears twice");
    }
  }
  return ok_status();
}

}  // namespace

Status write_safetensors_file(const std::string& path, std::span<const TensorBytesView> tensors,
                              const std::vector<std::string>& inputs) {
  std::vector<SafetensorsTensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  ASSIGN_OR_RETURN(const SafetensorsLayout layout,
                   plan_safetensors(std::move(specs), {{"format", "pt"}}));
  ASSIGN_OR_RETURN(UserFileWriter out, UserFileWriter::create(path, replace(inputs)));
  RETURN_IF_ERROR(write_safetensors(layout, tensors, out.sink()));
  return out.commit();
}

const char* adapter_format_name(AdapterFormat f) {
  return f == AdapterFormat::kTorchCompact ? "torch-compact" : "safetensors";
}

const char* adapter_file_name(AdapterFormat f) {
  return f == AdapterFormat::kTorchCompact ? kAdapterBinFile : kAdapterSafetensorsFile;
}

AdapterFormat choose_adapter_format(const DedupStats& stats) {
  return 2 * stats.unique_bytes < stats.logical_bytes ? AdapterFormat::kTorchCompact
                                                      : AdapterFormat::kSafetensors;
}

Result<AdapterPublication> publish_adapter(const std::string& dir,
                                           std::span<const TensorBytesView> tensors,
                                           std::string_view adapter_config_json, ThreadPool* pool,
                                           std::optional<AdapterFormat> force,
                                           const std::vector<std::string>& inputs) {
  RETURN_IF_ERROR(check_unique_names(tensors));
  if (!nlohmann::json::accept(adapter_config_json)) {
    return invalid_argument("adapter config for '" + dir + "' is not valid JSON");
  }
  // An adapter without keys would load as a no-op and hide a broken export.
  if (tensors.empty()) {
    return invalid_argument("adapter for '" + dir + "' has no tensors: nothing to publish");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create directory '" + dir + "': " + ec.message());

  AdapterPublication pub;
  const double t0 = now_s();
  ASSIGN_OR_RETURN(const DedupResult dedup, deduplicate(tensors, pool));
  pub.stats = dedup.stats;
  pub.format = force.value_or(choose_adapter_format(dedup.stats));
  pub.model_path = join(dir, adapter_file_name(pub.format));
  const double t1 = now_s();

  RETURN_IF_ERROR(remove_stale_temporaries(dir));
  const std::string marker = join(dir, kAdapterMarkerFile);
  const std::string stale = join(dir, adapter_file_name(pub.format == AdapterFormat::kTorchCompact
                                                            ? AdapterFormat::kSafetensors
                                                            : AdapterFormat::kTorchCompact));
  // Every file this publication writes or removes is checked before the first is touched, so
  // a refusal leaves the previous adapter whole.
  for (const std::string& path : {join(dir, kAdapterConfigFile), pub.model_path, marker, stale}) {
    RETURN_IF_ERROR(check_user_output(path, replace(inputs)));
  }
  // A directory published by someone else has no marker; name its current file first, so
  // that the moment both formats exist the marker already says which one is committed.
  if (!std::filesystem::exists(marker) && std::filesystem::exists(stale)) {
    const std::string name = std::filesystem::path(stale).filename().string();
    RETURN_IF_ERROR(write_text(marker, name, inputs));
  }
  RETURN_IF_ERROR(write_text(join(dir, kAdapterConfigFile), adapter_config_json, inputs));
  if (pub.format == AdapterFormat::kTorchCompact) {
    RETURN_IF_ERROR(write_compact_file(pub.model_path, tensors, dedup, inputs));
  } else {
    RETURN_IF_ERROR(write_safetensors_file(pub.model_path, tensors, inputs));
  }
  const std::string committed = adapter_file_name(pub.format);
  // Steady state (the same format every step) finds the marker already right: no rewrite.
  if (read_marker(marker) != committed) {
    RETURN_IF_ERROR(write_text(marker, committed, inputs));
  }
  RETURN_IF_ERROR(remove_file_durably(stale));
  pub.file_bytes = std::filesystem::file_size(pub.model_path, ec);
  pub.dedup_s = t1 - t0;
  pub.write_s = now_s() - t1;
  return pub;
}

}  // namespace weightcast
