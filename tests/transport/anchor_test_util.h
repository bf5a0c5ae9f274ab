// Helpers shared by the anchor suites (anchor_test.cc, anchor_damage_test.cc): a scratch
// directory, deterministic models of mixed dtypes or of BF16 tensors sized for several shards,
// small shard options, whole-file reads and writes, and an error check that names its needles.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "transport/fs/anchor_writer.h"

namespace weightcast::anchor_testing {

using Bytes = std::vector<uint8_t>;

// A fresh directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / "anchor_test.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string sub(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

struct Model {
  std::vector<std::string> names;
  std::vector<Bytes> data;
  std::vector<AnchorTensor> tensors;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape) {
    uint64_t numel = 1;
    for (const int64_t d : shape) numel *= static_cast<uint64_t>(d);
    Bytes bytes(numel * dtype_size(dtype));
    uint64_t x = 0x9E3779B97F4A7C15ull * (data.size() + 1);
    for (auto& b : bytes) b = static_cast<uint8_t>((x = x * 6364136223846793005ull + 1) >> 56);
    names.push_back(name);
    data.push_back(std::move(bytes));
    tensors.push_back({name, dtype, std::move(shape), {}});
  }
  std::span<const AnchorTensor> view() {
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = data[i];
    return tensors;
  }
};

inline Model mixed_model() {
  Model m;
  m.add("model.embed_tokens.weight", DType::kBF16, {33, 40});
  m.add("model.norm.scale", DType::kF32, {});
  m.add("model.empty", DType::kI64, {0, 4});
  m.add("model.layers.0.mask", DType::kBool, {13});
  m.add("model.layers.0.q.weight", DType::kF8E4M3FN, {17, 9});
  m.add("model.layers.0.counts", DType::kI32, {3, 7});
  m.add("lm_head.weight", DType::kF64, {5, 3});
  m.add("model.layers.0.bytes", DType::kU8, {11});
  return m;
}

// Tensor bytes 5, 3, 40, 6, 2, 10, 1 KiB: with 16 KiB shards and 4 KiB slices the 40 KiB tensor
// gets a file of its own and most tensors span several slices.
inline Model sharded_model() {
  Model m;
  const int kib[] = {5, 3, 40, 6, 2, 10, 1};
  for (int i = 0; i < 7; ++i) m.add("w" + std::to_string(i), DType::kBF16, {kib[i], 512});
  return m;
}

inline AnchorWriteOptions small_options(size_t threads = 4) {
  AnchorWriteOptions o;
  o.shard_bytes = 16 << 10;
  o.slice_bytes = 4 << 10;
  o.threads = threads;
  return o;
}

inline Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline void expect_error(const Status& s, StatusCode code,
                         const std::vector<std::string>& needles) {
  ASSERT_EQ(s.code(), code) << s.to_string();
  for (const auto& n : needles) {
    EXPECT_NE(s.message().find(n), std::string::npos) << s.message() << "\nlacks: " << n;
  }
}

}  // namespace weightcast::anchor_testing
