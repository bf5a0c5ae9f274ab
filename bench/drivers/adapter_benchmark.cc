#include "bench/drivers/adapter_benchmark.h"

#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <filesystem>

#include "codec/base/file_io.h"
#include "codec/base/thread_pool.h"
#include "codec/workload/adapter_fixtures.h"
#include "src/adapter_load.h"
#include "src/adapter_publish.h"
#include "transport/user_file_writer.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename Fn>
Result<double> best_of(int reps, Fn&& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    RETURN_IF_ERROR(fn());
    best = std::min(best, now_s() - t0);
  }
  return best;
}

struct RoundTrip {
  double publish_s = 0, load_s = 0;
  uint64_t file_bytes = 0;
};

// Publishes into the same directory repeatedly, as a trainer does every step (one untimed
// publication first sets the directory up), and loads every key into its own storage, as an
// engine does.
Result<RoundTrip> publish_and_load(const std::string& dir, const AdapterFixture& f,
                                   ThreadPool* pool, std::optional<AdapterFormat> force, int reps) {
  RoundTrip rt;
  fs::remove_all(dir);
  RETURN_IF_ERROR(publish_adapter(dir, f.tensors, f.adapter_config_json, pool, force).status());
  ASSIGN_OR_RETURN(rt.publish_s, best_of(reps, [&]() -> Status {
                     auto pub = publish_adapter(dir, f.tensors, f.adapter_config_json, pool, force);
                     if (pub.ok()) rt.file_bytes = pub->file_bytes;
                     return pub.status();
                   }));
  ASSIGN_OR_RETURN(rt.load_s, best_of(reps, [&]() -> Status {
                     auto loaded = load_adapter(dir);
                     if (loaded.ok() && loaded->tensors.size() != f.tensors.size()) {
                       return internal_error("bench adapter: loaded key count differs");
                     }
                     return loaded.status();
                   }));
  return rt;
}

// What a user without weightcast does: the config and one safetensors file, each atomically.
Status plain_safetensors_publication(const std::string& dir, const AdapterFixture& f) {
  const std::string& c = f.adapter_config_json;
  RETURN_IF_ERROR(write_user_file(dir + "/" + kAdapterConfigFile,
                                  {reinterpret_cast<const uint8_t*>(c.data()), c.size()}, {}));
  return write_safetensors_file(dir + "/" + kAdapterSafetensorsFile, f.tensors);
}

}  // namespace

Result<nlohmann::json> run_adapter_benchmark(const AdapterBenchmarkConfig& c) {
  const bool own_dir = c.work_dir.empty();
  const std::string root =
      own_dir
          ? (fs::temp_directory_path() / ("weightcast-bench-adapter-" + std::to_string(::getpid())))
                .string()
          : c.work_dir;
  fs::create_directories(root);
  ThreadPool pool(c.threads);

  GlmAdapterOptions go;
  go.hidden = c.glm_hidden;
  go.moe_intermediate = c.glm_hidden / 2;
  const AdapterFixture glm = make_glm_shared_expert_adapter(go);
  ASSIGN_OR_RETURN(const RoundTrip compact, publish_and_load(root + "/glm-compact", glm, &pool,
                                                             std::nullopt, c.repetitions));
  ASSIGN_OR_RETURN(const RoundTrip plain,
                   publish_and_load(root + "/glm-safetensors", glm, &pool,
                                    AdapterFormat::kSafetensors, c.repetitions));
  ASSIGN_OR_RETURN(const DedupResult dedup, deduplicate(glm.tensors));

  // Fingerprinting against raw XXH3-128 over the same bytes, both single-threaded, then the
  // fingerprinting on the pool.
  double xxh3_s = 1e300, fingerprint_s = 1e300, fingerprint_pool_s = 1e300;
  for (int r = 0; r < c.repetitions; ++r) {
    const double t0 = now_s();
    uint64_t sink = 0;
    for (const auto& t : glm.tensors) sink += XXH3_128bits(t.bytes.data(), t.bytes.size()).low64;
    xxh3_s = std::min(xxh3_s, now_s() - t0);
    if (sink == 42) return internal_error("unlikely");
    DedupTimings serial, pooled;
    RETURN_IF_ERROR(deduplicate(glm.tensors, nullptr, &serial).status());
    RETURN_IF_ERROR(deduplicate(glm.tensors, &pool, &pooled).status());
    fingerprint_s = std::min(fingerprint_s, serial.fingerprint_s);
    fingerprint_pool_s = std::min(fingerprint_pool_s, pooled.fingerprint_s);
  }

  Qwen3AdapterOptions qo;
  qo.layers = c.qwen_layers;
  const AdapterFixture dense = make_qwen3_dense_adapter(qo);
  ASSIGN_OR_RETURN(const RoundTrip dense_rule, publish_and_load(root + "/dense-rule", dense, &pool,
                                                                std::nullopt, c.repetitions));
  fs::create_directories(root + "/dense-plain");
  RETURN_IF_ERROR(plain_safetensors_publication(root + "/dense-plain", dense));
  ASSIGN_OR_RETURN(const double dense_plain_s, best_of(c.repetitions, [&] {
                     return plain_safetensors_publication(root + "/dense-plain", dense);
                   }));
  ASSIGN_OR_RETURN(const DedupResult dense_dedup, deduplicate(dense.tensors));
  if (own_dir) fs::remove_all(root);

  const double compact_total = compact.publish_s + compact.load_s;
  const double plain_total = plain.publish_s + plain.load_s;
  const uint64_t artifact_limit = dedup.stats.unique_bytes + dedup.stats.unique_bytes / 100 + 65536;
  return nlohmann::json{
      {"glm_keys", dedup.stats.keys},
      {"glm_unique_storages", dedup.stats.unique_storages},
      {"glm_logical_bytes", dedup.stats.logical_bytes},
      {"glm_unique_bytes", dedup.stats.unique_bytes},
      {"compact_file_bytes", compact.file_bytes},
      {"compact_file_limit_bytes", artifact_limit},
      {"compact_file_within_limit", compact.file_bytes <= artifact_limit},
      {"safetensors_file_bytes", plain.file_bytes},
      {"compact_publish_s", compact.publish_s},
      {"compact_load_s", compact.load_s},
      {"safetensors_publish_s", plain.publish_s},
      {"safetensors_load_s", plain.load_s},
      {"compact_speedup", plain_total / compact_total},
      {"xxh3_128_s", xxh3_s},
      {"fingerprint_s", fingerprint_s},
      {"fingerprint_vs_xxh3", xxh3_s / fingerprint_s},
      {"fingerprint_pool_s", fingerprint_pool_s},
      {"fingerprint_pool_vs_xxh3", xxh3_s / fingerprint_pool_s},
      {"dense_keys", dense_dedup.stats.keys},
      {"dense_logical_bytes", dense_dedup.stats.logical_bytes},
      {"dense_rule_format", adapter_format_name(choose_adapter_format(dense_dedup.stats))},
      {"dense_rule_publish_s", dense_rule.publish_s},
      {"dense_plain_safetensors_s", dense_plain_s},
      {"dense_overhead", dense_rule.publish_s / dense_plain_s - 1.0},
      {"threads", c.threads},
      {"repetitions", c.repetitions},
  };
}

}  // namespace weightcast
