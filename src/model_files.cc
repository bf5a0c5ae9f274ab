#include "src/model_files.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "codec/formats/safetensors_format.h"

namespace weightcast {
namespace {

constexpr uint64_t kMaxIndexBytes = 256u << 20;

Status add_safetensors_file(const std::string& path, const std::set<std::string>* expected,
                            ModelFiles* model) {
  ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  auto parsed = parse_safetensors(file.bytes());
  if (!parsed.ok()) return Status(parsed.status().code(), path + ": " + parsed.status().message());
  for (auto& t : parsed->tensors) {
    if (expected != nullptr && !expected->contains(t.name)) {
      return data_loss(path + ": tensor '" + t.name +
                       "' is not in the index's weight_map for this file");
    }
    model->total_bytes += t.bytes.size();
    model->tensors.push_back(std::move(t));
  }
  model->files.push_back(std::move(file));  // the mapping (and the views) stay where they are
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<ModelFiles>> read_model_files(const std::string& path) {
  auto model = std::make_unique<ModelFiles>();
  if (path.ends_with(".json")) {
    ASSIGN_OR_RETURN(auto text, read_whole_file(path, kMaxIndexBytes));
    const auto json = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
    if (json.is_discarded() || !json.is_object() || !json.contains("weight_map") ||
        !json["weight_map"].is_object()) {
      return data_loss(path + ": not a safetensors index (an object with a \"weight_map\" object)");
    }
    std::map<std::string, std::set<std::string>> by_file;
    for (const auto& [name, file] : json["weight_map"].items()) {
      if (!file.is_string())
        return data_loss(path + ": weight_map['" + name + "'] is not a string");
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        return data_loss(path + ": shard '" + f + "' of tensor '" + name +
                         "' is not a file next to the index");
      }
      by_file[f].insert(name);
    }
    const std::string dir = std::filesystem::path(path).parent_path().string();
    size_t listed = 0;
    for (const auto& [file, names] : by_file) {
      const size_t before = model->tensors.size();
      RETURN_IF_ERROR(
          add_safetensors_file((dir.empty() ? "." : dir) + "/" + file, &names, model.get()));
      if (model->tensors.size() - before != names.size()) {
        return data_loss(path + ": shard '" + file + "' lacks tensors its weight_map names");
      }
      listed += names.size();
    }
    if (listed != model->tensors.size()) return data_loss(path + ": tensor count disagrees");
  } else {
    RETURN_IF_ERROR(add_safetensors_file(path, nullptr, model.get()));
  }
  std::sort(model->tensors.begin(), model->tensors.end(),
            [](const TensorBytesView& a, const TensorBytesView& b) { return a.name < b.name; });
  for (size_t i = 1; i < model->tensors.size(); ++i) {
    if (model->tensors[i].name == model->tensors[i - 1].name) {
      return data_loss(path + ": tensor '" + model->tensors[i].name + "' appears in two shards");
    }
  }
  return model;
}

Status write_model_file(const std::string& path, std::span<const TensorBytesView> tensors,
                        const UserFileOptions& options) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  ASSIGN_OR_RETURN(auto layout, plan_safetensors(std::move(specs), {}));
  ASSIGN_OR_RETURN(auto writer, UserFileWriter::create(path, options));
  RETURN_IF_ERROR(write_safetensors(layout, tensors, writer.sink()));
  return writer.commit();
}

}  // namespace weightcast
