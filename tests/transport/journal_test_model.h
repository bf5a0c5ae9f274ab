// A small deterministic model for the journal tests: mixed dtypes and shapes (an odd length,
// a scalar, an empty tensor, an 8-byte tensor that never changes), advanced one version at a
// time by changing about 1 % of the elements of every 1-, 2- and 4-byte tensor, so the bytes
// of version v can be rebuilt from the seed in any process (the crash test's reference).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/dtype.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_writer.h"

namespace weightcast::testing {

class JournalTestModel {
 public:
  explicit JournalTestModel(uint64_t seed, int64_t scale = 1) : seed_(seed) {
    add("layers.0.attn.q_proj.weight", DType::kBF16, {64 * scale, 128});
    add("layers.0.mlp.experts.weight", DType::kBF16, {8, 33, 17 * scale});
    add("layers.0.norm.weight", DType::kF32, {301});
    add("embed.scale", DType::kF32, {});
    add("quant.codes", DType::kU8, {1000});
    add("empty", DType::kF16, {0});
    add("position_ids", DType::kI64, {16});
    std::mt19937_64 rng(seed);
    for (auto& t : bytes_) {
      for (auto& b : t) b = static_cast<uint8_t>(rng());
    }
  }

  // Moves the model from version v - 1 to v (version 0 is the constructor's state).
  void advance_to(uint64_t v) {
    while (version_ < v) step(++version_);
  }

  uint64_t version() const { return version_; }
  size_t size() const { return names_.size(); }
  const std::vector<uint8_t>& bytes(size_t i) const { return bytes_[i]; }

  std::vector<PublishTensor> tensors() const {
    std::vector<PublishTensor> out;
    for (size_t i = 0; i < names_.size(); ++i)
      out.push_back({names_[i], dtypes_[i], shapes_[i], bytes_[i]});
    return out;
  }

  // Destinations shaped like the model, backed by `storage` (resized here).
  std::vector<ReaderDestination> destinations(std::vector<std::vector<uint8_t>>* storage) const {
    storage->assign(names_.size(), {});
    std::vector<ReaderDestination> out;
    for (size_t i = 0; i < names_.size(); ++i) {
      (*storage)[i].assign(bytes_[i].size(), 0xEE);
      out.push_back({names_[i], dtypes_[i], shapes_[i], (*storage)[i]});
    }
    return out;
  }

  uint64_t checksum(size_t i) const {
    const size_t elem = dtype_size(dtypes_[i]);
    return checksum_range(bytes_[i].data(), elem, bytes_[i].size() / elem, 0);
  }

 private:
  void add(std::string name, DType dtype, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    names_.push_back(std::move(name));
    dtypes_.push_back(dtype);
    shapes_.push_back(std::move(shape));
    bytes_.emplace_back(static_cast<size_t>(n) * dtype_size(dtype));
  }

  void step(uint64_t v) {
    std::mt19937_64 rng(seed_ * 1000003 + v);
    for (size_t i = 0; i < bytes_.size(); ++i) {
      const size_t elem = dtype_size(dtypes_[i]);
      if (elem == 8) continue;
      const size_t count = bytes_[i].size() / elem;
      for (size_t k = 0; k < count / 100 + 1 && count > 0; ++k) {
        const size_t at = static_cast<size_t>(rng() % count) * elem;
        bytes_[i][at] = static_cast<uint8_t>(bytes_[i][at] + 1 + rng() % 3);
      }
    }
  }

  uint64_t seed_;
  uint64_t version_ = 0;
  std::vector<std::string> names_;
  std::vector<DType> dtypes_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::vector<uint8_t>> bytes_;
};

// A fresh directory under /tmp, removed with everything in it at the end of the scope.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/weightcast-journal-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~ScratchDir() { (void)remove_tree(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace weightcast::testing
