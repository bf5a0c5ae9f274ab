#include "src/coalesce_benchmark.h"

#include <chrono>
#include <cstring>
#include <memory>

#include "codec/thread_pool.h"
#include "src/packed_expert_export.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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
  double per_slice_s = 1e300, coalesced_s = 1e300, memcpy_s = 1e300;
  size_t per_slice_calls = 0, coalesced_calls = 0, requests = 0;
  uint64_t total = 0;
  for (const auto& b : buffers) total += b.size();
  auto dst = std::make_unique_for_overwrite<uint8_t[]>(total);
  for (int r = 0; r < c.repetitions; ++r) {
    double t0 = now_s();
    auto a = export_packed_experts(params, {}, false, pool.get());
    per_slice_s = std::min(per_slice_s, now_s() - t0);
    RETURN_IF_ERROR(a.status());
    per_slice_calls = a->staged.transfer_calls();
    requests = a->tensors.size();
    a = internal_error("released");  // free before the next measurement
    t0 = now_s();
    auto b = export_packed_experts(params, {}, true, pool.get());
    coalesced_s = std::min(coalesced_s, now_s() - t0);
    RETURN_IF_ERROR(b.status());
    coalesced_calls = b->staged.transfer_calls();
    b = internal_error("released");
    t0 = now_s();
    uint64_t at = 0;
    for (const auto& buf : buffers) {
      std::memcpy(dst.get() + at, buf.data(), buf.size());
      at += buf.size();
    }
    memcpy_s = std::min(memcpy_s, now_s() - t0);
  }
  return nlohmann::json{{"requests", requests},
                        {"bytes", total},
                        {"per_slice_calls", per_slice_calls},
                        {"coalesced_calls", coalesced_calls},
                        {"per_slice_s", per_slice_s},
                        {"coalesced_s", coalesced_s},
                        {"memcpy_s", memcpy_s},
                        {"per_slice_vs_memcpy", per_slice_s / memcpy_s},
                        {"coalesced_vs_memcpy", coalesced_s / memcpy_s},
                        {"threads", c.threads},
                        {"note", "includes allocating the owned staging, as the export does"}};
}

}  // namespace weightcast
