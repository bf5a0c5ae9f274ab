#include "bench/drivers/journal_benchmark.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/drivers/anchor_benchmark.h"
#include "codec/base/thread_pool.h"
#include "codec/workload/synthetic_update.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_writer.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The model as a set of synthetic tensors stepped together; holds the bf16 bytes of the
// version before (what a publisher keeps to diff against).
class BenchModel {
 public:
  BenchModel(const JournalBenchmarkConfig& c, ThreadPool* pool) : pool_(pool) {
    const uint64_t per = c.parameters / c.tensors;
    for (uint64_t i = 0; i < c.tensors; ++i) {
      const int64_t cols = 4096;
      tensors_.emplace_back(per, cols, 1000 + i, pool);
      shapes_.push_back({static_cast<int64_t>(per) / cols, cols});
      if (per % cols != 0) shapes_.back() = {static_cast<int64_t>(per)};
      previous_.emplace_back(per * 2);
    }
    lr_ = calibrate_lr(c.density, 7);
  }

  std::vector<PublishTensor> current() const {
    std::vector<PublishTensor> out;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      auto bf16 = tensors_[i].bf16();
      out.push_back({"model.layers." + std::to_string(i) + ".weight",
                     DType::kBF16,
                     shapes_[i],
                     {reinterpret_cast<const uint8_t*>(bf16.data()), bf16.size() * 2}});
    }
    return out;
  }

  std::vector<PublishTensor> previous() const {
    auto out = current();
    for (size_t i = 0; i < out.size(); ++i) out[i].bytes = previous_[i];
    return out;
  }

  void step(uint64_t step_seed) {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      std::memcpy(previous_[i].data(), tensors_[i].bf16().data(), previous_[i].size());
      tensors_[i].step(lr_ * tensors_[i].sigma(), step_seed, pool_);
    }
  }

 private:
  ThreadPool* pool_;
  double lr_ = 0;
  std::vector<SyntheticTensor> tensors_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::vector<uint8_t>> previous_;
};

}  // namespace

Result<nlohmann::json> run_journal_benchmark(const JournalBenchmarkConfig& c) {
  if (c.tensors == 0 || c.parameters < c.tensors || c.density <= 0 || c.density > 0.9) {
    return invalid_argument("bench journal: need parameters >= tensors > 0, density in (0, 0.9]");
  }
  nlohmann::json out;
  if (c.anchor_bench_bytes > 0) {
    AnchorBenchmarkConfig a;
    a.dir = c.dir;
    a.total_bytes = c.anchor_bench_bytes;
    a.repetitions = c.repetitions;
    if (c.log) c.log("anchor write throughput over " + std::to_string(a.total_bytes) + " bytes");
    ASSIGN_OR_RETURN(out["anchor_write"], run_anchor_write_benchmark(a));
  }
  char tmpl[4096];
  std::snprintf(tmpl, sizeof tmpl, "%s/weightcast-bench-journal-XXXXXX", c.dir.c_str());
  if (::mkdtemp(tmpl) == nullptr) return io_error("cannot create a directory in '" + c.dir + "'");
  const std::string root = tmpl;
  ThreadPool pool(c.threads);
  if (c.log)
    c.log("generating a synthetic model of " + std::to_string(c.parameters) + " bf16 parameters");
  BenchModel model(c, &pool);

  JournalOptions options;
  options.root = root;
  options.anchor_every = 0;  // one anchor, then deltas only
  options.retention.keep_anchors = 1;
  options.anchor.threads = 4;
  options.pool = &pool;
  if (c.zstd) options.delta.compression = proto::COMPRESSION_ZSTD_BYTE_PLANES;
  Result<nlohmann::json> result = internal_error("not run");
  {
    ASSIGN_OR_RETURN(auto writer, JournalWriter::open(options));
    ASSIGN_OR_RETURN(auto anchor, writer->publish(0, model.current(), {}));
    out["model_bytes"] = c.parameters * 2;
    out["anchor_publish_s"] = anchor.seconds;
    std::vector<double> delta_s;
    uint64_t stored = 0, changed = 0;
    for (uint64_t v = 1; v <= c.deltas; ++v) {
      model.step(v);
      ASSIGN_OR_RETURN(auto r, writer->publish(v, model.current(), model.previous()));
      delta_s.push_back(r.seconds);
      stored += r.stored_bytes;
      changed += r.changed_elements;
      if (c.log) c.log("delta " + std::to_string(v) + ": " + std::to_string(r.seconds) + " s");
    }
    std::sort(delta_s.begin(), delta_s.end());
    out["delta_publish_s_median"] = delta_s[delta_s.size() / 2];
    out["delta_publish_s_min"] = delta_s.front();
    out["delta_publish_vs_anchor"] = delta_s[delta_s.size() / 2] / anchor.seconds;
    out["delta_bytes_mean"] = stored / c.deltas;
    out["density_measured"] = static_cast<double>(changed) / c.deltas / c.parameters;
    out["bits_per_change"] = changed > 0 ? 8.0 * stored / changed : 0.0;
  }
  {
    // A fresh reader: anchor 0, then every delta.
    std::vector<std::vector<uint8_t>> storage;
    std::vector<ReaderDestination> dests;
    for (const auto& t : model.current()) {
      storage.emplace_back(t.bytes.size());
      dests.push_back({t.name, t.dtype, t.shape, storage.back()});
    }
    CatchUpOptions ro;
    ro.pool = &pool;
    CatchUpReader reader(root, dests, ro);
    const double t0 = now_s();
    ASSIGN_OR_RETURN(auto caught, reader.catch_up());
    out["catch_up_s"] = now_s() - t0;
    out["catch_up_deltas"] = caught.deltas_applied;
    const auto expected = model.current();
    for (size_t i = 0; i < expected.size(); ++i) {
      if (std::memcmp(storage[i].data(), expected[i].bytes.data(), storage[i].size()) != 0) {
        return internal_error("bench journal: the reader's " + expected[i].name +
                              " differs from the publisher's");
      }
    }
  }
  (void)remove_tree(root);
  out["parameters"] = c.parameters;
  out["tensors"] = c.tensors;
  out["deltas"] = c.deltas;
  out["threads"] = c.threads;
  out["zstd"] = c.zstd;
  return out;
}

}  // namespace weightcast
