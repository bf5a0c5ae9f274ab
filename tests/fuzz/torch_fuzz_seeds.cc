#include "tests/fuzz/torch_fuzz_seeds.h"
#include "tests/codec/torch_parameter_pickle.h"
#include "tests/test_bytes.h"

#include <cstring>
#include <string>
#include <string_view>

#include "codec/base/byte_io.h"
#include "codec/formats/torch_artifact.h"
#include "codec/formats/zip_archive.h"

namespace weightcast::fuzzing {
namespace {

using testing::Bytes;
using testing::bytes_of;
using testing::kParameterPickle;
using testing::sink_into;

Bytes zip_of(const std::vector<std::pair<std::string, Bytes>>& records, bool zip64 = false) {
  Bytes out;
  ZipWriterOptions o;
  o.force_zip64 = zip64;
  ZipWriter w(sink_into(&out), o);
  for (const auto& [name, data] : records) {
    if (!w.add_stored(name, data).ok()) return {};
  }
  return w.finish().ok() ? out : Bytes{};
}

// Rewrites every local header the way PyTorch's miniz writer leaves it: bit 3 (data
// descriptor) set and CRC and sizes zero; the central directory keeps the real values.
Bytes with_zeroed_local_headers(Bytes zip) {
  auto parsed = parse_zip(zip);
  if (!parsed.ok()) return {};
  for (const ZipEntry& e : parsed->entries) {
    uint8_t* l = zip.data() + e.local_header_offset;
    store_le<uint16_t>(l + 6, 0x0808);
    std::memset(l + 14, 0, 12);
  }
  return zip;
}

Bytes from_hex(std::string_view hex) {
  Bytes out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// data.pkl of torch 1.13's `torch.save(torch.nn.Linear(2, 1).state_dict())`.
constexpr std::string_view kStateDictPickle =
    "800263636f6c6c656374696f6e730a4f726465726564446963740a71002952710128580600000077656967687471"
    "0263746f7263682e5f7574696c730a5f72656275696c645f74656e736f725f76320a71032828580700000073746f"
    "72616765710463746f7263680a466c6f617453746f726167650a7105580100000030710658030000006370757107"
    "4b02747108514b004b014b028671094b024b0186710a8968002952710b74710c52710d580400000062696173710e"
    "6803282868046805580100000031710f68074b01747110514b004b018571114b0185711289680029527113747114"
    "527115757d711658090000005f6d657461646174617117680029527118580000000071197d711a58070000007665"
    "7273696f6e711b4b01737373622e";

Bytes artifact(std::span<const TorchStorage> storages, std::span<const TorchTensorRef> tensors,
               bool zip64) {
  Bytes out;
  TorchWriteOptions o;
  o.force_zip64 = zip64;
  return write_torch_artifact("m", storages, tensors, sink_into(&out), o).ok() ? out : Bytes{};
}

}  // namespace

std::vector<std::vector<uint8_t>> make_zip_seeds() {
  Bytes counting(300);
  for (size_t i = 0; i < counting.size(); ++i) counting[i] = static_cast<uint8_t>(i);
  const std::vector<std::pair<std::string, Bytes>> records = {
      {"a/data.pkl", bytes_of("\x80\x02}.")},
      {"a/empty", {}},
      {"a/data/0", counting},
      {"a/version", bytes_of("3\n")}};
  std::vector<std::pair<std::string, Bytes>> many;
  for (int i = 0; i < 40; ++i) many.push_back({"d/" + std::to_string(i), Bytes(i % 7, 'x')});
  std::vector<Bytes> seeds = {zip_of(records), zip_of(records, true), zip_of({}), zip_of(many),
                              zip_of({{"x", {}}}, true)};
  seeds.push_back(with_zeroed_local_headers(zip_of(records)));
  seeds.push_back(with_zeroed_local_headers(zip_of(records, true)));
  std::erase_if(seeds, [](const Bytes& s) { return s.empty(); });
  return seeds;
}

std::vector<std::vector<uint8_t>> make_torch_artifact_seeds() {
  Bytes f32(12 * 4), bf16(6), f8(16, 0x38), i64(16);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i * 13);
  for (size_t i = 0; i < i64.size(); ++i) i64[i] = static_cast<uint8_t>(255 - i);
  const std::vector<TorchStorage> storages = {{"0", DType::kF32, f32},
                                              {"1", DType::kBF16, bf16},
                                              {"2", DType::kF8E4M3FN, f8},
                                              {"3", DType::kI64, i64}};
  const std::vector<TorchTensorRef> tensors = {
      {"w", 0, 0, {3, 4}, {4, 1}},   {"w.t", 0, 0, {4, 3}, {1, 4}}, {"w.row1", 0, 4, {4}, {1}},
      {"bias", 1, 0, {3}, {1}},      {"bias.last", 1, 2, {}, {}},   {"none", 1, 3, {0}, {1}},
      {"fp8", 2, 0, {4, 4}, {4, 1}}, {"count", 3, 1, {}, {}},
  };
  std::vector<Bytes> seeds;
  for (bool zip64 : {false, true}) seeds.push_back(artifact(storages, tensors, zip64));
  seeds.push_back(artifact(std::span(storages).first(1), std::span(tensors).first(1), false));
  seeds.push_back(artifact({}, {}, false));
  seeds.push_back(with_zeroed_local_headers(artifact(storages, tensors, false)));
  Bytes weight(8), bias(4);
  seeds.push_back(
      with_zeroed_local_headers(zip_of({{"archive/data.pkl", from_hex(kStateDictPickle)},
                                        {"archive/data/0", weight},
                                        {"archive/data/1", bias},
                                        {"archive/version", bytes_of("3\n")}})));
  seeds.push_back(
      with_zeroed_local_headers(zip_of({{"archive/data.pkl", from_hex(kParameterPickle)},
                                        {"archive/data/0", Bytes(12, 0x3f)},
                                        {"archive/version", bytes_of("3\n")}})));
  std::erase_if(seeds, [](const Bytes& s) { return s.empty(); });
  return seeds;
}

}  // namespace weightcast::fuzzing
