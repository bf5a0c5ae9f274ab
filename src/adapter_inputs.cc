#include "src/adapter_inputs.h"

#include <cstring>

#include "codec/formats/safetensors_format.h"
#include "codec/formats/torch_artifact.h"
#include "codec/tensor_ref.h"
#include "src/adapter_load.h"

namespace weightcast {
namespace {

bool row_major(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride) {
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && stride[d] != step) return false;
    step *= shape[d];
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<AdapterInput>> read_adapter_input(const std::string& path) {
  auto in = std::make_unique<AdapterInput>();
  ASSIGN_OR_RETURN(in->file, MappedFile::open(path));
  const auto bytes = in->file.bytes();
  if (!looks_like_zip(bytes)) {
    auto st = parse_safetensors(bytes);
    if (!st.ok()) return st.status().with_context("'" + path + "'");
    in->tensors = std::move(st->tensors);
    in->file_storages = in->tensors.size();
    return in;
  }
  in->torch_format = true;
  auto art = parse_torch_artifact(bytes);
  if (!art.ok()) return art.status().with_context("'" + path + "'");
  in->file_storages = art->storages.size();
  for (const auto& r : art->tensors) {
    const TorchStorage& s = art->storages[r.storage];
    const size_t es = dtype_size(s.dtype);
    ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(r.shape, "tensor '" + r.name + "'"));
    if (row_major(r.shape, r.stride)) {
      in->tensors.push_back(
          {r.name, s.dtype, r.shape,
           s.bytes.subspan(static_cast<size_t>(r.storage_offset) * es, numel * es)});
      continue;
    }
    // A strided view (a transposed or sliced tensor in a torch.save file): gather it.
    TensorRef view;
    view.name = r.name;
    view.dtype = s.dtype;
    view.shape = r.shape;
    view.strides = r.stride;
    const ElementAddresser addr(view);
    std::vector<uint8_t> copy(numel * es);
    for (uint64_t k = 0; k < numel; ++k) {
      const int64_t off = r.storage_offset + addr.offset_of(k);
      std::memcpy(copy.data() + k * es, s.bytes.data() + off * static_cast<int64_t>(es), es);
    }
    in->copies.push_back(std::move(copy));
    in->tensors.push_back({r.name, s.dtype, r.shape, in->copies.back()});
  }
  return in;
}

}  // namespace weightcast
