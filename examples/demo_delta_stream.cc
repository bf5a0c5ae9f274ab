// The demo of the main job on one machine: a trainer with a (scaled) Qwen3-30B-A3B-shaped
// model takes Adam-bf16 steps; after each it publishes every tensor's sparse delta into a step
// file on the filesystem; an engine holding the previous version reads the file, applies each
// record in place with the refuse/verify/revert guarantees, and must end bit-identical to the
// trainer. Then it shows the guarantees: a step applied twice and a corrupted file are
// refused and the engine's weights are untouched.
//
//   weightcast_demo [--scale 0.2] [--steps 3] [--density 0.01] [--threads 2] [--dir DIR]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "codec/base/file_io.h"
#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/workload/model_shapes.h"
#include "codec/workload/synthetic_update.h"
#include "src/cli/number_flags.h"

namespace wc = weightcast;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct TrainerTensor {
  wc::TensorShapeSpec spec;
  wc::SyntheticTensor weights;
  std::vector<uint16_t> published;  // the bf16 bits of the last published version
  uint64_t published_checksum = 0;
};

struct EngineTensor {
  std::vector<uint16_t> bf16;
  uint64_t checksum = 0;  // C() of the version it holds, tracked across applies
};

wc::TensorRef engine_view(const std::string& name, EngineTensor& t) {
  return wc::TensorRef::contiguous(name, wc::DType::kBF16, t.bf16.data(),
                                   static_cast<int64_t>(t.bf16.size()));
}

// Applies every record of a step file; on the first refusal reports it and stops.
wc::Status engine_apply_step(const std::string& path, std::vector<EngineTensor>& engine,
                             const std::vector<TrainerTensor>& names, wc::ThreadPool* pool) {
  ASSIGN_OR_RETURN(const auto bytes, wc::read_whole_file(path));
  auto records = wc::parse_delta_file(bytes);
  if (!records.ok()) return records.status().with_context(path);
  if (records->size() != engine.size()) {
    return wc::data_loss(path + ": " + std::to_string(records->size()) + " records for " +
                         std::to_string(engine.size()) + " tensors");
  }
  for (size_t i = 0; i < engine.size(); ++i) {
    const auto& rec = (*records)[i];
    if (rec.header.name != names[i].spec.name) {
      return wc::data_loss(path + ": record " + std::to_string(i) + " is for '" + rec.header.name +
                           "'");
    }
    wc::ApplyOptions o;
    o.current_checksum = engine[i].checksum;
    o.pool = pool;
    auto r = wc::apply_delta(rec, engine_view(names[i].spec.name, engine[i]), o);
    if (!r.ok()) return r.status();
    engine[i].checksum = r->checksum;
  }
  return wc::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "weightcast demo: a trainer publishes sparse bf16 deltas, an engine applies and verifies "
      "them"};
  double scale = 0.2, density = 0.01;
  int steps = 3;
  size_t threads = 2;
  std::string dir;
  app.add_option("--scale", scale, "Model size relative to Qwen3-30B-A3B")
      ->capture_default_str()
      ->check(weightcast::cli::number_in<double>(0.001, 1.0));
  app.add_option("--steps", steps, "Optimizer steps to publish")
      ->capture_default_str()
      ->check(weightcast::cli::number_in<int>(1, 1000));
  app.add_option("--density", density, "Fraction of bf16 weights each step changes")
      ->capture_default_str()
      ->check(weightcast::cli::number_in<double>(0.0001, 0.9));
  app.add_option("--threads", threads, "Threads for encode and apply")
      ->capture_default_str()
      ->check(weightcast::cli::number_in<size_t>(1, weightcast::cli::kMaxThreads));
  app.add_option(
      "--dir", dir,
      "Directory for the step files (default: a fresh temp directory, removed at the end)");
  CLI11_PARSE(app, argc, argv);

  const bool own_dir = dir.empty();
  if (own_dir)
    dir = (fs::temp_directory_path() / ("weightcast-demo-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  wc::ThreadPool pool(threads);

  const auto layers = wc::model_layer_list(wc::ModelFamily::kQwen3_30B_A3B, scale);
  const uint64_t total = wc::total_elements(layers);
  std::printf(
      "trainer: Qwen3-30B-A3B shape at scale %.3f: %zu tensors, %.1f M bf16 weights (%.1f MiB)\n",
      scale, layers.size(), total / 1e6, total * 2.0 / (1 << 20));
  const double relative_lr = wc::calibrate_lr(density, 1);

  auto t0 = std::chrono::steady_clock::now();
  std::vector<TrainerTensor> trainer;
  std::vector<EngineTensor> engine;
  trainer.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const uint64_t n = [&] {
      uint64_t e = 1;
      for (auto d : layers[i].shape) e *= static_cast<uint64_t>(d);
      return e;
    }();
    TrainerTensor t{layers[i], wc::SyntheticTensor(n, layers[i].fan_in, 1000 + i, &pool), {}, 0};
    t.published.assign(t.weights.bf16().begin(), t.weights.bf16().end());
    t.published_checksum = wc::checksum_range(t.published.data(), 2, n, 0, &pool);
    engine.push_back({t.published, t.published_checksum});  // both start from the boot weights
    trainer.push_back(std::move(t));
  }
  std::printf("boot:    trainer and engine hold version 0 (%.2f s to generate)\n\n",
              seconds_since(t0));
  std::printf("%-5s %11s %8s %12s %10s %9s %9s %9s %9s\n", "step", "changed", "density",
              "delta bytes", "bits/chg", "vs full", "vs patch", "encode s", "apply s");

  std::string last_step;
  for (int step = 1; step <= steps; ++step) {
    std::vector<uint8_t> file = wc::delta_file_header(static_cast<uint32_t>(trainer.size()));
    uint64_t changed = 0;
    double encode_s = 0;
    for (auto& t : trainer) {
      t.weights.step(relative_lr * t.weights.sigma(), static_cast<uint64_t>(step), &pool);
      const auto now = t.weights.bf16();
      wc::EncodeOptions o;
      o.name = t.spec.name;
      o.base_version = static_cast<uint64_t>(step - 1);
      o.target_version = static_cast<uint64_t>(step);
      o.base_checksum = t.published_checksum;
      o.pool = &pool;
      const auto e0 = std::chrono::steady_clock::now();
      auto enc = wc::encode_delta(
          {reinterpret_cast<const uint8_t*>(t.published.data()), t.published.size() * 2},
          {reinterpret_cast<const uint8_t*>(now.data()), now.size() * 2}, o);
      encode_s += seconds_since(e0);
      if (!enc.ok()) {
        std::fprintf(stderr, "demo: %s\n", enc.status().to_string().c_str());
        return 1;
      }
      file.insert(file.end(), enc->record.begin(), enc->record.end());
      changed += enc->header.changed;
      t.published.assign(now.begin(), now.end());
      t.published_checksum = enc->header.target_checksum;
    }
    char name[64];
    std::snprintf(name, sizeof(name), "/step-%06d.wcd", step);
    last_step = dir + name;
    if (auto s = wc::write_file_atomically(last_step, file); !s.ok()) {
      std::fprintf(stderr, "demo: %s\n", s.to_string().c_str());
      return 1;
    }
    const auto a0 = std::chrono::steady_clock::now();
    if (auto s = engine_apply_step(last_step, engine, trainer, &pool); !s.ok()) {
      std::fprintf(stderr, "demo: engine refused step %d: %s\n", step, s.to_string().c_str());
      return 1;
    }
    const double apply_s = seconds_since(a0);
    for (size_t i = 0; i < trainer.size(); ++i) {
      if (engine[i].bf16 != trainer[i].published) {
        std::fprintf(stderr, "demo: engine tensor '%s' differs from the trainer after step %d\n",
                     trainer[i].spec.name.c_str(), step);
        return 1;
      }
    }
    const double bits = 8.0 * static_cast<double>(file.size()) / static_cast<double>(changed);
    std::printf("%-5d %11llu %7.3f%% %12zu %10.2f %8.0fx %8.1fx %9.3f %9.3f\n", step,
                static_cast<unsigned long long>(changed), 100.0 * changed / total, file.size(),
                bits, total * 2.0 / file.size(), 48.0 / bits, encode_s, apply_s);
  }
  std::printf(
      "\nengine: bit-identical to the trainer after every step; every tensor checksum verified\n");
  std::printf(
      "        (vs full = bf16 bytes of the model / delta bytes; vs patch = an int32 index + bf16 "
      "value per change)\n\n");

  // The guarantees, shown on the last step's file.
  std::vector<std::vector<uint16_t>> before;
  for (const auto& e : engine) before.push_back(e.bf16);
  auto again = engine_apply_step(last_step, engine, trainer, &pool);
  std::printf("re-applying %s: %s\n", fs::path(last_step).filename().c_str(),
              again.ok() ? "ACCEPTED (bug!)" : again.to_string().c_str());
  auto bytes = wc::read_whole_file(last_step);
  if (bytes.ok()) {
    (*bytes)[bytes->size() / 2] ^= 0x10;
    const std::string bad = dir + "/corrupted.wcd";
    if (wc::write_file_atomically(bad, *bytes).ok()) {
      auto corrupt = engine_apply_step(bad, engine, trainer, &pool);
      std::printf("applying a corrupted copy: %s\n",
                  corrupt.ok() ? "ACCEPTED (bug!)" : corrupt.to_string().c_str());
      if (corrupt.ok()) again = wc::ok_status();
    }
  }
  bool untouched = true;
  for (size_t i = 0; i < engine.size(); ++i) untouched = untouched && engine[i].bf16 == before[i];
  std::printf("engine weights after both refusals: %s\n",
              untouched ? "unchanged" : "CHANGED (bug!)");
  if (own_dir) fs::remove_all(dir);
  return again.ok() || !untouched ? 1 : 0;
}
