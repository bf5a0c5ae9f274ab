#include "codec/formats/torch_artifact.h"

#include <unordered_map>
#include <unordered_set>

namespace weightcast {
namespace {

constexpr std::string_view kVersionRecord = "3\n";  // torch.save's kProducedFileFormatVersion
constexpr std::string_view kByteOrder = "little";

std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string_view as_text(std::span<const uint8_t> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// Storage keys become record names: keep them to characters every unzip tool and file system
// takes (torch.save itself uses decimal numbers).
bool safe_storage_key(std::string_view key) {
  if (key.empty() || key.size() > 255 || key == "." || key == "..") return false;
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// "3\n" -> 3; digits with an optional newline, nothing else.
bool parse_version(std::string_view text, uint64_t* version) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (text.empty() || text.size() > 18) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *version = v;
  return v >= 1;
}

}  // namespace

Status check_view_in_storage(const TorchTensorRef& view, uint64_t storage_numel,
                             const std::string& what) {
  if (view.shape.size() != view.stride.size()) {
    return data_loss(what + ": " + std::to_string(view.shape.size()) + " sizes but " +
                     std::to_string(view.stride.size()) + " strides");
  }
  if (view.storage_offset < 0) {
    return data_loss(what + ": negative storage offset " + std::to_string(view.storage_offset));
  }
  bool empty = false;
  for (size_t d = 0; d < view.shape.size(); ++d) {
    if (view.shape[d] < 0 || view.stride[d] < 0) {
      return data_loss(what + ": negative size or stride in dim " + std::to_string(d));
    }
    empty |= view.shape[d] == 0;
  }
  const auto offset = static_cast<uint64_t>(view.storage_offset);
  const std::string bounds = " of a storage of " + std::to_string(storage_numel) + " elements";
  if (empty) {
    if (offset > storage_numel) {
      return data_loss(what + ": empty view at offset " + std::to_string(offset) + " is outside" +
                       bounds);
    }
    return ok_status();
  }
  // Largest element index the view touches, with every step checked for overflow.
  uint64_t last = offset;
  for (size_t d = 0; d < view.shape.size(); ++d) {
    uint64_t reach = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(view.shape[d] - 1),
                               static_cast<uint64_t>(view.stride[d]), &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      return data_loss(what + ": view extent overflows 64 bits");
    }
  }
  if (last >= storage_numel) {
    return data_loss(what + ": view (offset " + std::to_string(offset) + ", last element " +
                     std::to_string(last) + ") reaches outside" + bounds);
  }
  return ok_status();
}

Status write_torch_artifact(std::string_view archive_name, std::span<const TorchStorage> storages,
                            std::span<const TorchTensorRef> tensors, const ByteSink& sink,
                            const TorchWriteOptions& options) {
  Status named = validate_zip_entry_name(archive_name, 255);
  if (!named.ok() || archive_name.find('/') != std::string_view::npos) {
    return invalid_argument("torch artifact: archive name '" + std::string(archive_name) +
                            "' is not a single safe path component");
  }
  std::unordered_set<std::string_view> keys;
  for (const TorchStorage& s : storages) {
    if (!safe_storage_key(s.key) || !keys.insert(s.key).second) {
      return invalid_argument("torch artifact: storage key '" + s.key +
                              "' is duplicate or not made of [A-Za-z0-9_.-]");
    }
    if (s.bytes.size() % dtype_size(s.dtype) != 0) {
      return invalid_argument("torch artifact: storage '" + s.key + "' has " +
                              std::to_string(s.bytes.size()) + " bytes, not a whole number of " +
                              std::string(dtype_name(s.dtype)));
    }
  }
  std::vector<bool> used(storages.size(), false);
  std::vector<PickledTensor> pickled;
  pickled.reserve(tensors.size());
  for (const TorchTensorRef& t : tensors) {
    const std::string what = "torch artifact: tensor '" + t.name + "'";
    if (t.storage >= storages.size()) {
      return invalid_argument(what + " refers to storage #" + std::to_string(t.storage) + " of " +
                              std::to_string(storages.size()));
    }
    const TorchStorage& s = storages[t.storage];
    const uint64_t numel = s.bytes.size() / dtype_size(s.dtype);
    Status in_bounds = check_view_in_storage(t, numel, what);
    if (!in_bounds.ok()) return invalid_argument(in_bounds.message());
    used[t.storage] = true;
    pickled.push_back(PickledTensor{.name = t.name,
                                    .storage_key = s.key,
                                    .dtype = s.dtype,
                                    .storage_numel = numel,
                                    .storage_offset = t.storage_offset,
                                    .shape = t.shape,
                                    .stride = t.stride});
  }
  for (size_t i = 0; i < storages.size(); ++i) {
    if (!used[i]) {
      return invalid_argument("torch artifact: storage '" + storages[i].key +
                              "' is not used by any tensor");
    }
  }
  ASSIGN_OR_RETURN(const std::vector<uint8_t> pickle, write_torch_pickle(pickled));

  ZipWriterOptions zip_options;
  zip_options.force_zip64 = options.force_zip64;
  ZipWriter zip([&sink](std::span<const uint8_t> b) { return sink(b); }, zip_options);
  const std::string root = std::string(archive_name) + "/";
  RETURN_IF_ERROR(zip.add_stored(root + "data.pkl", pickle));
  RETURN_IF_ERROR(zip.add_stored(root + "byteorder", as_bytes(kByteOrder)));
  for (const TorchStorage& s : storages) {
    RETURN_IF_ERROR(zip.add_stored(root + "data/" + s.key, s.bytes));
  }
  RETURN_IF_ERROR(zip.add_stored(root + "version", as_bytes(kVersionRecord)));
  return zip.finish();
}

Result<TorchArtifact> parse_torch_artifact(std::span<const uint8_t> file,
                                           const TorchReadOptions& options) {
  ASSIGN_OR_RETURN(const ZipArchive zip, parse_zip(file, options.zip));
  if (zip.entries.empty()) return data_loss("torch artifact: the zip has no records");
  // Like PyTorchStreamReader, the first record names the archive folder; unlike it, every
  // record must then be inside that folder.
  TorchArtifact out;
  const std::string& first = zip.entries.front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos) {
    return data_loss("torch artifact: record '" + first + "' is not inside an archive folder");
  }
  out.archive_name = first.substr(0, slash);
  const std::string root = out.archive_name + "/";
  std::unordered_map<std::string_view, const ZipEntry*> records;
  for (const ZipEntry& e : zip.entries) {
    if (!e.name.starts_with(root)) {
      return data_loss("torch artifact: record '" + e.name + "' is outside the archive folder '" +
                       out.archive_name + "'");
    }
    records.emplace(std::string_view(e.name).substr(root.size()), &e);
  }
  const auto record = [&](std::string_view name) -> const ZipEntry* {
    auto it = records.find(name);
    return it == records.end() ? nullptr : it->second;
  };

  const ZipEntry* version = record(".data/version");
  if (version == nullptr) version = record("version");
  if (version == nullptr) {
    return data_loss("torch artifact: no '" + root + "version' record (torch.load requires it)");
  }
  if (!parse_version(as_text(version->data), &out.version)) {
    return data_loss("torch artifact: record '" + version->name +
                     "' does not hold a version number");
  }
  if (const ZipEntry* order = record("byteorder"); order && as_text(order->data) != kByteOrder) {
    return Status(StatusCode::kUnimplemented, "torch artifact: byte order '" +
                                                  std::string(as_text(order->data).substr(0, 16)) +
                                                  "' is not supported (only little-endian)");
  }
  const ZipEntry* pkl = record("data.pkl");
  if (pkl == nullptr) return data_loss("torch artifact: no '" + root + "data.pkl' record");
  auto pickled = read_torch_pickle(pkl->data, options.pickle);
  if (!pickled.ok()) return pickled.status().with_context("torch artifact '" + pkl->name + "'");

  std::unordered_map<std::string_view, size_t> storage_index;
  out.tensors.reserve(pickled->size());
  for (const PickledTensor& t : *pickled) {
    const std::string what = "torch artifact: tensor '" + t.name + "'";
    auto [it, fresh] = storage_index.emplace(t.storage_key, out.storages.size());
    if (fresh) {
      if (!safe_storage_key(t.storage_key)) {
        return data_loss(what + ": storage key '" + t.storage_key + "' is not a safe record name");
      }
      const ZipEntry* data = record("data/" + t.storage_key);
      if (data == nullptr) {
        return data_loss(what + ": storage '" + t.storage_key + "' has no record '" + root +
                         "data/" + t.storage_key + "'");
      }
      const uint64_t expected = t.storage_numel * dtype_size(t.dtype);  // <= 2^62, checked
      if (data->data.size() != expected) {
        return data_loss(what + ": record '" + data->name + "' has " +
                         std::to_string(data->data.size()) + " bytes but the storage size is " +
                         std::to_string(t.storage_numel) + " x " +
                         std::string(dtype_name(t.dtype)) + " = " + std::to_string(expected));
      }
      out.storages.push_back(
          TorchStorage{.key = t.storage_key, .dtype = t.dtype, .bytes = data->data});
    }
    TorchTensorRef ref{.name = t.name,
                       .storage = it->second,
                       .storage_offset = t.storage_offset,
                       .shape = t.shape,
                       .stride = t.stride};
    RETURN_IF_ERROR(check_view_in_storage(ref, t.storage_numel, what));
    out.tensors.push_back(std::move(ref));
  }
  return out;
}

}  // namespace weightcast
