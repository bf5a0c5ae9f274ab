#include "bench/drivers/delta_benchmark.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/workload/synthetic_update.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` timings of fn(); `prepare` runs untimed before each.
template <typename Prepare, typename Fn>
double best_of(int reps, Prepare&& prepare, Fn&& fn) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    prepare();
    const double t0 = now_s();
    fn();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

}  // namespace

Result<nlohmann::json> run_delta_benchmark(const DeltaBenchmarkConfig& c) {
  if (c.elements == 0 || c.density <= 0 || c.density > 0.9) {
    return invalid_argument("bench delta: need elements > 0 and density in (0, 0.9]");
  }
  auto pool = c.threads > 1 ? std::make_unique<ThreadPool>(c.threads) : nullptr;
  ThreadPool setup_pool(0);  // data generation is not measured; use every core

  SyntheticTensor tensor(c.elements, c.fan_in, c.seed, &setup_pool);
  const size_t bytes = c.elements * 2;
  std::vector<uint8_t> old_bytes(bytes), old_copy(bytes), new_bytes(bytes), dest(bytes);
  std::memcpy(old_bytes.data(), tensor.bf16().data(), bytes);
  const double lr = calibrate_lr(c.density, c.seed, c.fan_in);
  tensor.step(lr, /*step_seed=*/1, &setup_pool);
  std::memcpy(new_bytes.data(), tensor.bf16().data(), bytes);
  std::memcpy(old_copy.data(), old_bytes.data(), bytes);

  volatile int sink = 0;
  const double memcmp_s = best_of(
      c.repetitions, [] {},
      [&] { sink = sink + std::memcmp(old_bytes.data(), old_copy.data(), bytes); });

  EncodeOptions eo;
  eo.name = "bench.weight";
  eo.dtype = DType::kBF16;
  eo.chunk_elements = c.chunk_elements;
  eo.pool = pool.get();
  const uint64_t base_checksum = checksum_range(old_bytes.data(), 2, c.elements, 0, &setup_pool);
  Result<EncodedDelta> encoded = internal_error("not run");
  // Steady state: the publisher knows the base checksum from the previous version.
  eo.base_checksum = base_checksum;
  const double encode_s = best_of(
      c.repetitions, [&] { encoded = internal_error("not run"); },
      [&] { encoded = encode_delta(old_bytes, new_bytes, eo); });
  RETURN_IF_ERROR(encoded.status());
  // Cold: the encoder also computes the base checksum with a full pass.
  eo.base_checksum.reset();
  Result<EncodedDelta> cold = internal_error("not run");
  const double encode_cold_s = best_of(
      c.repetitions, [] {}, [&] { cold = encode_delta(old_bytes, new_bytes, eo); });
  RETURN_IF_ERROR(cold.status());
  if (cold->record != encoded->record)
    return internal_error("bench delta: cold and steady encodes differ");

  ASSIGN_OR_RETURN(const DeltaRecordView record, parse_delta_record(encoded->record));
  const TensorRef view = TensorRef::contiguous("bench.weight", DType::kBF16, dest.data(),
                                               static_cast<int64_t>(c.elements));
  ApplyOptions ao;
  ao.pool = pool.get();
  Result<ApplyReport> applied = internal_error("not run");
  auto reset_dest = [&] { std::memcpy(dest.data(), old_bytes.data(), bytes); };
  // Steady state: the engine knows its checksum from its last verified apply.
  ao.current_checksum = base_checksum;
  const double apply_s =
      best_of(c.repetitions, reset_dest, [&] { applied = apply_delta(record, view, ao); });
  RETURN_IF_ERROR(applied.status());
  if (dest != new_bytes)
    return internal_error("bench delta: applied result differs from the new version");
  // Cold: apply first verifies the destination's base checksum with a full pass.
  ao.current_checksum.reset();
  const double apply_cold_s =
      best_of(c.repetitions, reset_dest, [&] { applied = apply_delta(record, view, ao); });
  RETURN_IF_ERROR(applied.status());
  if (dest != new_bytes)
    return internal_error("bench delta: applied result differs from the new version");

  const auto& h = encoded->header;
  const double changed = static_cast<double>(h.changed);
  nlohmann::json modes = nlohmann::json::object();
  for (size_t m = 0; m < encoded->chunks_by_mode.size(); ++m) {
    modes[chunk_mode_name(static_cast<ChunkMode>(m))] = encoded->chunks_by_mode[m];
  }
  return nlohmann::json{
      {"density", c.density},
      {"measured_density", changed / static_cast<double>(c.elements)},
      {"elements", c.elements},
      {"dtype", "bf16"},
      {"threads", c.threads},
      {"chunk_elements", c.chunk_elements},
      {"changed", h.changed},
      {"encoded_bytes", encoded->record.size()},
      {"bits_per_change", changed == 0 ? 0.0 : 8.0 * encoded->record.size() / changed},
      {"sparse_patch_bits_per_change", 48},
      {"memcmp_s", memcmp_s},
      {"encode_s", encode_s},
      {"apply_s", apply_s},
      {"encode_vs_memcmp", encode_s / memcmp_s},
      {"apply_vs_memcmp", apply_s / memcmp_s},
      {"encode_cold_s", encode_cold_s},
      {"apply_cold_s", apply_cold_s},
      {"encode_cold_vs_memcmp", encode_cold_s / memcmp_s},
      {"apply_cold_vs_memcmp", apply_cold_s / memcmp_s},
      {"chunk_modes", modes},
      {"repetitions", c.repetitions},
  };
}

}  // namespace weightcast
