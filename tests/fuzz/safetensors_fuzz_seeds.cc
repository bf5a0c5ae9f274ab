// Seed files for the safetensors fuzz target: written by plan_safetensors/write_safetensors,
// plus hand-written headers in the styles other writers use.
#include "tests/fuzz/safetensors_fuzz_seeds.h"

#include <map>
#include <random>
#include <string>

#include "codec/base/byte_io.h"
#include "codec/formats/safetensors_format.h"

namespace weightcast::fuzzing {
namespace {

// Our writer's file for `specs`, tensor bytes a fixed pattern; empty if the specs are invalid.
std::vector<uint8_t> written(const std::vector<SafetensorsTensorSpec>& specs,
                             const std::map<std::string, std::string>& metadata = {}) {
  auto layout = plan_safetensors(specs, metadata);
  if (!layout.ok()) return {};
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorBytesView> views;
  for (const auto& t : layout->tensors) {
    std::vector<uint8_t> bytes(t.data_end - t.data_begin);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 29 + 3);
    storage.push_back(std::move(bytes));
  }
  for (size_t i = 0; i < storage.size(); ++i) {
    const auto& t = layout->tensors[i];
    views.push_back({t.name, t.dtype, t.shape, storage[i]});
  }
  std::vector<uint8_t> out;
  const Status s = write_safetensors(*layout, views, [&](std::span<const uint8_t> piece) {
    out.insert(out.end(), piece.begin(), piece.end());
    return ok_status();
  });
  return s.ok() ? out : std::vector<uint8_t>{};
}

// A file with `json` as its header verbatim, followed by `data_bytes` pattern bytes.
std::vector<uint8_t> hand_written(const std::string& json, size_t data_bytes) {
  std::vector<uint8_t> out;
  out.reserve(8 + json.size() + data_bytes);  // GCC 12 -Warray-bounds misreads the growth
  append_le<uint64_t>(&out, json.size());
  out.insert(out.end(), json.begin(), json.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

}  // namespace

std::vector<std::vector<uint8_t>> make_safetensors_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  seeds.push_back(written({}));
  seeds.push_back(written({}, {{"format", "pt"}}));
  seeds.push_back(written({{"a", DType::kF32, {2}}, {"b", DType::kBF16, {1, 3}}}));

  std::vector<SafetensorsTensorSpec> every_dtype;
  for (const auto& info : all_dtypes()) {
    every_dtype.push_back({std::string(info.name), info.dtype, {2}});
  }
  every_dtype.push_back({"scalar", DType::kF64, {}});
  every_dtype.push_back({"empty", DType::kBF16, {0, 3}});
  every_dtype.push_back({"esc\"aped\\\n\x01/é", DType::kF8E4M3FN, {1, 2}});
  seeds.push_back(written(every_dtype, {{"format", "pt"}, {"step", "12"}}));

  std::mt19937_64 rng(2027);
  std::vector<SafetensorsTensorSpec> random_specs;
  for (int i = 0; i < 16; ++i) {
    const auto& info = all_dtypes()[rng() % all_dtypes().size()];
    std::vector<int64_t> shape(rng() % 4);
    for (auto& d : shape) d = static_cast<int64_t>(rng() % 4);
    random_specs.push_back({"layers." + std::to_string(i) + ".w", info.dtype, shape});
  }
  seeds.push_back(written(random_specs));

  // The reference crate's documentation example: unpadded, data right after the header.
  seeds.push_back(
      hand_written(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})", 16));
  // Header order differs from data order, metadata last, an unknown field, whitespace.
  seeds.push_back(hand_written(
      R"( {"b": {"shape": [2], "dtype": "F32", "data_offsets": [4, 12], "extra": [1, {"x": null}]},)"
      R"( "a": {"dtype": "F8_E5M2", "shape": [2, 2], "data_offsets": [0, 4]},)"
      R"( "z": {"dtype": "BF16", "shape": [0], "data_offsets": [4, 4]}, "__metadata__": {"k": "v"}})",
      12));
  return seeds;
}

}  // namespace weightcast::fuzzing
