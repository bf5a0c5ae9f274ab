#include "bench/drivers/coalesce_benchmark.h"

#include <chrono>
#include <cstring>
#include <memory>

#include "codec/base/thread_pool.h"
#include "src/packed_expert_export.h"
#include "transport/staging_pool.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best (lowest) seconds of each path.
struct Times {
  double per_slice_s = 1e300, coalesced_s = 1e300, memcpy_s = 1e300;
};

// The reference: the same bytes, one memcpy per source buffer, back to back in `dst`.
void copy_all(const std::vector<std::vector<uint8_t>>& buffers, uint8_t* dst) {
  uint64_t at = 0;
  for (const auto& buf : buffers) {
    std::memcpy(dst + at, buf.data(), buf.size());
    at += buf.size();
  }
}

}  // namespace

Result<nlohmann::json> run_coalesce_benchmark(const CoalesceBenchmarkConfig& c) {
  // One packed f32 parameter per expert size class (2, 4, 8, 16 MiB per expert), experts/4
  // experts each, with its two optimizer moments: 3 x 4 packed tensors, `experts` slices per
  // state and size class... kept simple: four parameters of experts/4 experts each.
  const int per_param = std::max(1, c.experts / 4);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<PackedParameter> params;
  buffers.reserve(12);
  for (int k = 0; k < 4; ++k) {
    const int64_t expert_floats = (int64_t{2} << k) << 20 >> 2;  // 2^k * 2 MiB of f32
    PackedParameter p{
        "experts", "w" + std::to_string(k), DType::kF32, {per_param, expert_floats}, {}, {}, {}};
    std::span<const uint8_t>* states[] = {&p.master, &p.exp_avg, &p.exp_avg_sq};
    for (auto* s : states) {
      buffers.emplace_back(static_cast<size_t>(per_param * expert_floats * 4),
                           static_cast<uint8_t>(k + 1));
      *s = buffers.back();
    }
    params.push_back(p);
  }
  auto pool = c.threads > 1 ? std::make_unique<ThreadPool>(c.threads) : nullptr;
  uint64_t total = 0;
  for (const auto& b : buffers) total += b.size();
  Times cold, warm;
  size_t per_slice_calls = 0, coalesced_calls = 0, requests = 0;
  // Cold: every export allocates fresh staging, as a one-off export does.
  for (int r = 0; r < c.repetitions; ++r) {
    for (bool coalesce : {false, true}) {
      const double t0 = now_s();
      auto e = export_packed_experts(params, {}, coalesce, pool.get());
      const double t = now_s() - t0;
      RETURN_IF_ERROR(e.status());
      double& best = coalesce ? cold.coalesced_s : cold.per_slice_s;
      best = std::min(best, t);
      (coalesce ? coalesced_calls : per_slice_calls) = e->staged.transfer_calls();
      requests = e->tensors.size();
    }  // the export (and its staging) is freed here, before the next measurement
    const double t0 = now_s();
    auto dst = std::make_unique_for_overwrite<uint8_t[]>(total);
    copy_all(buffers, dst.get());
    cold.memcpy_s = std::min(cold.memcpy_s, now_s() - t0);
  }
  // Warm: staging drawn from a StagingPool that one untimed export filled, as a training
  // loop exporting every step does. The cap leaves room for capacities rounded up.
  uint64_t reused = 0, staged = 0;
  for (bool coalesce : {false, true}) {
    StagingPool staging(2 * total);
    RETURN_IF_ERROR(export_packed_experts(params, {}, coalesce, pool.get(), &staging).status());
    for (int r = 0; r < c.repetitions; ++r) {
      const double t0 = now_s();
      auto e = export_packed_experts(params, {}, coalesce, pool.get(), &staging);
      const double t = now_s() - t0;
      RETURN_IF_ERROR(e.status());
      double& best = coalesce ? warm.coalesced_s : warm.per_slice_s;
      best = std::min(best, t);
      reused += e->staged.reused_transfers();
      staged += e->staged.transfer_calls();
    }
  }
  {
    auto dst = std::make_unique_for_overwrite<uint8_t[]>(total);
    copy_all(buffers, dst.get());  // untimed first touch
    for (int r = 0; r < c.repetitions; ++r) {
      const double t0 = now_s();
      copy_all(buffers, dst.get());
      warm.memcpy_s = std::min(warm.memcpy_s, now_s() - t0);
    }
  }
  return nlohmann::json{
      {"requests", requests},
      {"bytes", total},
      {"per_slice_calls", per_slice_calls},
      {"coalesced_calls", coalesced_calls},
      {"per_slice_s", cold.per_slice_s},
      {"coalesced_s", cold.coalesced_s},
      {"memcpy_s", warm.memcpy_s},
      {"memcpy_cold_s", cold.memcpy_s},
      {"per_slice_warm_s", warm.per_slice_s},
      {"coalesced_warm_s", warm.coalesced_s},
      {"warm_reused_transfers", reused},
      {"warm_transfers", staged},
      {"per_slice_vs_memcpy", cold.per_slice_s / warm.memcpy_s},
      {"coalesced_vs_memcpy", cold.coalesced_s / warm.memcpy_s},
      {"coalesced_vs_memcpy_cold", cold.coalesced_s / cold.memcpy_s},
      {"coalesced_warm_vs_memcpy", warm.coalesced_s / warm.memcpy_s},
      {"threads", c.threads},
      {"repetitions", c.repetitions},
      {"note",
       "best of `repetitions`. per_slice_s, coalesced_s: fresh staging every export "
       "(mapped, pre-faulted per piece with MADV_POPULATE_WRITE), as a one-off export pays; "
       "*_warm_s: staging "
       "reused from a StagingPool filled by one untimed export, as a loop exporting every step "
       "pays (warm_reused_transfers of warm_transfers were reuses). memcpy_s: one memcpy per "
       "buffer into a destination touched before; memcpy_cold_s: into a fresh allocation"}};
}

}  // namespace weightcast
