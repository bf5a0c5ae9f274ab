// The C++ side of the interop tests (tests/interop/run_interop.sh):
//   interop_tool write DIR    publish a shared-storage adapter (torch artifact) and a dense
//                             one (safetensors) under DIR, with every key's raw bytes in
//                             DIR/expected/ and DIR/expected.json describing keys and aliases
//   interop_tool check FILE EXPECTED_DIR
//                             read FILE (a safetensors or torch.save file Python wrote) with
//                             our readers and compare every key with EXPECTED_DIR/<key>.bin
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "codec/base/file_io.h"
#include "codec/dedup.h"
#include "codec/workload/adapter_fixtures.h"
#include "src/adapter_inputs.h"
#include "src/adapter_publish.h"

namespace wc = weightcast;
namespace fs = std::filesystem;

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "interop_tool: %s\n", what.c_str());
  return 1;
}

bool write_raw(const fs::path& p, std::span<const uint8_t> bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(f);
}

int write_fixture(const fs::path& dir, const char* name, const wc::AdapterFixture& f,
                  nlohmann::json* manifest) {
  auto pub = wc::publish_adapter((dir / name).string(), f.tensors, f.adapter_config_json);
  if (!pub.ok()) return fail(pub.status().to_string());
  auto dedup = wc::deduplicate(f.tensors);
  if (!dedup.ok()) return fail(dedup.status().to_string());
  nlohmann::json keys = nlohmann::json::object();
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& t = f.tensors[i];
    const std::string file = std::string(name) + "-" + std::to_string(i) + ".bin";
    if (!write_raw(dir / "expected" / file, t.bytes)) return fail("cannot write " + file);
    keys[t.name] = {{"file", file},
                    {"dtype", std::string(wc::dtype_info(t.dtype).safetensors)},
                    {"shape", t.shape},
                    {"storage", dedup->storage_of[i]}};
  }
  (*manifest)[name] = {
      {"model", pub->model_path}, {"format", wc::adapter_format_name(pub->format)}, {"keys", keys}};
  return 0;
}

int write_all(const fs::path& dir) {
  fs::create_directories(dir / "expected");
  nlohmann::json manifest;
  wc::GlmAdapterOptions g;
  g.layers = 2;
  g.experts = 16;
  g.hidden = 64;
  g.moe_intermediate = 32;
  g.rank = 8;
  wc::Qwen3AdapterOptions q;
  q.layers = 2;
  q.hidden = 64;
  q.intermediate = 96;
  q.rank = 8;
  if (int rc = write_fixture(dir, "shared", wc::make_glm_shared_expert_adapter(g), &manifest))
    return rc;
  if (int rc = write_fixture(dir, "dense", wc::make_qwen3_dense_adapter(q), &manifest)) return rc;
  std::ofstream(dir / "expected.json") << manifest.dump(1);
  std::printf("interop_tool: wrote fixtures to %s\n", dir.c_str());
  return 0;
}

// EXPECTED_DIR/expected.json: {key: {"dtype": "F32", "shape": [..], "file": "x.bin", "storage": s}}
int check(const std::string& file, const fs::path& expected_dir) {
  auto input = wc::read_adapter_input(file);
  if (!input.ok()) return fail(input.status().to_string());
  std::ifstream js(expected_dir / "expected.json");
  const auto expected = nlohmann::json::parse(js, nullptr, false);
  if (expected.is_discarded()) return fail("cannot parse expected.json");
  if (expected.size() != (*input)->tensors.size()) {
    return fail(file + ": " + std::to_string((*input)->tensors.size()) + " keys, expected " +
                std::to_string(expected.size()));
  }
  for (const auto& t : (*input)->tensors) {
    if (!expected.contains(t.name)) return fail(file + ": unexpected key '" + t.name + "'");
    const auto& e = expected[t.name];
    if (e["dtype"].get<std::string>() != wc::dtype_info(t.dtype).safetensors) {
      return fail(t.name + ": dtype " + std::string(wc::dtype_info(t.dtype).safetensors));
    }
    if (e["shape"].get<std::vector<int64_t>>() != t.shape) return fail(t.name + ": shape differs");
    auto want = wc::read_whole_file((expected_dir / e["file"].get<std::string>()).string());
    if (!want.ok()) return fail(want.status().to_string());
    if (!std::equal(want->begin(), want->end(), t.bytes.begin(), t.bytes.end())) {
      return fail(t.name + ": bytes differ");
    }
  }
  std::printf("interop_tool: %s: %zu keys over %llu storages match byte for byte\n", file.c_str(),
              (*input)->tensors.size(), static_cast<unsigned long long>((*input)->file_storages));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "write" && argc == 3) return write_all(argv[2]);
  if (cmd == "check" && argc == 4) return check(argv[2], argv[3]);
  std::fprintf(stderr, "usage: interop_tool write DIR | interop_tool check FILE EXPECTED_DIR\n");
  return cmd == "--help" ? 0 : 2;
}
