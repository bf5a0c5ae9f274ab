// The public adapter functions over src/adapter_publish.h and src/adapter_load.h.
#include "weightcast/adapter.h"

#include <span>
#include <utility>

#include "codec/base/thread_pool.h"
#include "src/adapter_load.h"
#include "src/adapter_publish.h"
#include "src/api/conversions.h"

namespace weightcast::api {

namespace in = ::weightcast;

Result<AdapterReport> publish_adapter(const std::string& dir, const std::vector<TensorRef>& tensors,
                                      const std::string& config_json, size_t threads) {
  std::vector<in::TensorBytesView> views;
  for (const auto& t : tensors) {
    const in::TensorRef ref = to_internal(t);
    if (Status s = from_internal(ref.validate()); !s.ok()) return s;
    if (t.memory != MemoryKind::kHost && t.memory != MemoryKind::kHostPinned) {
      return Status(StatusCode::kInvalidArgument,
                    "tensor '" + t.name + "': adapter tensors must be in host memory");
    }
    if (!ref.is_contiguous()) {
      return Status(StatusCode::kInvalidArgument,
                    "tensor '" + t.name + "': adapter tensors must be contiguous");
    }
    views.push_back({t.name, ref.dtype, t.shape,
                     std::span<const uint8_t>(ref.first_byte(), t.numel() * ref.element_size())});
  }
  in::ThreadPool pool(threads);
  auto published = in::publish_adapter(dir, views, config_json, &pool);
  if (!published.ok()) return from_internal(published.status());
  AdapterReport out;
  out.format = in::adapter_format_name(published->format);
  out.model_path = published->model_path;
  out.keys = published->stats.keys;
  out.logical_bytes = published->stats.logical_bytes;
  out.unique_storages = published->stats.unique_storages;
  out.unique_bytes = published->stats.unique_bytes;
  out.file_bytes = published->file_bytes;
  return out;
}

Result<LoadedAdapter> load_adapter(const std::string& path, bool to_bf16) {
  in::AdapterLoadOptions options;
  options.to_bf16 = to_bf16;
  auto loaded = in::load_adapter(path, options);
  if (!loaded.ok()) return from_internal(loaded.status());
  LoadedAdapter out;
  out.format = in::adapter_format_name(loaded->format);
  out.model_path = loaded->model_path;
  out.config_json = std::move(loaded->config_json);
  out.file_bytes = loaded->file_bytes;
  for (auto& t : loaded->tensors) {
    out.tensors.push_back(LoadedAdapterTensor{std::move(t.name), static_cast<DType>(t.dtype),
                                              std::move(t.shape), std::move(t.bytes)});
  }
  return out;
}

}  // namespace weightcast::api
