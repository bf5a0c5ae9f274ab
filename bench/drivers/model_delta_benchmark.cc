#include "bench/drivers/model_delta_benchmark.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/checksum.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/delta_format.h"
#include "codec/workload/model_shapes.h"
#include "codec/workload/synthetic_update.h"
#include "transport/nccl/broadcast_schedule.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Delta parts as DeltaPartWriter cuts them (transport/fs/delta_step.cc), sizes only: a part
// is a kDeltaFileHeaderBytes header and records back to back; a record that would take a
// non-empty part past part_bytes, or past kMaxRecordsPerFile records, starts a new one.
class PartSizer {
 public:
  explicit PartSizer(uint64_t part_bytes) : part_bytes_(part_bytes) {}

  void add(uint64_t record_bytes) {
    if (open_ > 0 && (open_ + record_bytes > part_bytes_ || records_ == kMaxRecordsPerFile)) {
      close();
    }
    if (open_ == 0) open_ = kDeltaFileHeaderBytes;
    open_ += record_bytes;
    ++records_;
  }
  // The part sizes in order; call once, after the last add.
  std::vector<uint64_t> finish() {
    if (open_ > 0) close();
    return std::move(parts_);
  }

 private:
  void close() {
    parts_.push_back(open_);
    open_ = 0;
    records_ = 0;
  }

  uint64_t part_bytes_;
  uint64_t open_ = 0;  // bytes of the part being filled, 0 when none is open
  uint32_t records_ = 0;
  std::vector<uint64_t> parts_;
};

// Buffers reused across tensors; each only grows, so the largest tensor sets the footprint.
struct Scratch {
  std::vector<uint8_t> old_bytes, old_copy, dest;
};

void fit(std::vector<uint8_t>& v, size_t bytes) {
  if (v.size() < bytes) v.resize(bytes);
}

// "1.23 GiB", "4.56 MiB" or "789 B": progress lines read at any scale.
std::string human_bytes(uint64_t bytes) {
  char s[32];
  if (bytes >= (uint64_t{1} << 30)) {
    std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
  } else if (bytes >= (uint64_t{1} << 20)) {
    std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(bytes) / (uint64_t{1} << 20));
  } else {
    std::snprintf(s, sizeof s, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return s;
}

// Applies `encoded` to a copy of the base and compares the result with the new version.
Status verify_record(const TensorShapeSpec& spec, const EncodedDelta& encoded,
                     std::span<const uint8_t> old_bytes, std::span<const uint8_t> new_bytes,
                     std::vector<uint8_t>& dest, ThreadPool* pool) {
  const std::string what = "bench model-delta: tensor '" + spec.name + "'";
  fit(dest, old_bytes.size());
  std::memcpy(dest.data(), old_bytes.data(), old_bytes.size());
  ASSIGN_OR_RETURN(const DeltaRecordView record, parse_delta_record(encoded.record));
  const TensorRef view = TensorRef::contiguous(spec.name, DType::kBF16, dest.data(),
                                               static_cast<int64_t>(spec.elements()));
  ApplyOptions ao;
  ao.pool = pool;
  auto applied = apply_delta(record, view, ao);
  if (!applied.ok()) return applied.status().with_context(what);
  if (applied->changed != encoded.header.changed) {
    return internal_error(what + ": apply wrote " + std::to_string(applied->changed) +
                          " elements, the record lists " + std::to_string(encoded.header.changed));
  }
  if (std::memcmp(dest.data(), new_bytes.data(), new_bytes.size()) != 0) {
    return internal_error(what + ": applied record differs from the new version");
  }
  return ok_status();
}

}  // namespace

Result<nlohmann::json> run_model_delta_benchmark(const ModelDeltaBenchmarkConfig& c) {
  ASSIGN_OR_RETURN(const ModelFamily family, model_family_from_name(c.family));
  if (!(c.scale > 0) || !std::isfinite(c.scale)) {
    return invalid_argument("bench model-delta: scale must be positive, got " +
                            std::to_string(c.scale));
  }
  if (!(c.density > 0 && c.density <= 0.9)) {
    return invalid_argument("bench model-delta: density must lie in (0, 0.9], got " +
                            std::to_string(c.density));
  }
  if (c.threads == 0 || c.verify_every == 0 || c.part_bytes == 0) {
    return invalid_argument("bench model-delta: threads, verify_every and part_bytes must be > 0");
  }
  const double t_start = now_s();
  const std::vector<TensorShapeSpec> specs = model_layer_list(family, c.scale);
  const uint64_t elements = total_elements(specs);
  auto pool = c.threads > 1 ? std::make_unique<ThreadPool>(c.threads) : nullptr;
  // As SyntheticModel: one relative lr for the model, step seed of version 1.
  const double lr = calibrate_lr(c.density, c.seed);
  const uint64_t step_seed = c.seed * 1000003 + 1;

  Scratch s;
  PartSizer parts(c.part_bytes);
  uint64_t done_elements = 0, changed = 0, records = 0, delta_bytes = 0, verified = 0;
  std::array<uint64_t, 5> modes{};
  double generate_s = 0, checksum_s = 0, encode_s = 0, memcmp_s = 0, verify_s = 0;
  int next_decile = 1;
  volatile int sink = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorShapeSpec& spec = specs[i];
    const uint64_t n = spec.elements();
    const size_t bytes = static_cast<size_t>(n) * 2;
    double t0 = now_s();
    SyntheticTensor tensor(n, spec.fan_in, c.seed * 7919 + i, pool.get());
    fit(s.old_bytes, bytes);
    std::memcpy(s.old_bytes.data(), tensor.bf16().data(), bytes);
    tensor.step(lr * tensor.sigma(), step_seed, pool.get());
    const std::span<const uint8_t> old_bytes(s.old_bytes.data(), bytes);
    const std::span<const uint8_t> new_bytes(reinterpret_cast<const uint8_t*>(tensor.bf16().data()),
                                             bytes);
    generate_s += now_s() - t0;

    if (c.memcmp_reference) {
      fit(s.old_copy, bytes);
      std::memcpy(s.old_copy.data(), old_bytes.data(), bytes);
      t0 = now_s();
      sink = sink + std::memcmp(old_bytes.data(), s.old_copy.data(), bytes);
      memcmp_s += now_s() - t0;
    }

    // Steady state, as a publisher: the base checksum is known from the previous version.
    t0 = now_s();
    const uint64_t base_checksum = checksum_range(old_bytes.data(), 2, n, 0, pool.get());
    checksum_s += now_s() - t0;
    EncodeOptions eo;
    eo.name = spec.name;
    eo.dtype = DType::kBF16;
    eo.base_checksum = base_checksum;
    eo.pool = pool.get();
    t0 = now_s();
    auto encoded = encode_delta(old_bytes, new_bytes, eo);
    encode_s += now_s() - t0;
    if (!encoded.ok()) return encoded.status().with_context("bench model-delta");
    const uint64_t tensor_changed = encoded->header.changed;
    changed += tensor_changed;
    for (size_t m = 0; m < modes.size(); ++m) modes[m] += encoded->chunks_by_mode[m];
    // The journal ships no record for an unchanged tensor (journal_writer.cc).
    if (tensor_changed > 0) {
      ++records;
      delta_bytes += encoded->record.size();
      parts.add(encoded->record.size());
    }

    if (i % c.verify_every == 0 || i + 1 == specs.size()) {
      t0 = now_s();
      RETURN_IF_ERROR(verify_record(spec, *encoded, old_bytes, new_bytes, s.dest, pool.get()));
      verify_s += now_s() - t0;
      ++verified;
    }

    done_elements += n;
    if (c.log && next_decile <= 9 && done_elements * 10 >= elements * next_decile) {
      while (next_decile <= 9 && done_elements * 10 >= elements * next_decile) ++next_decile;
      char line[256];
      std::snprintf(line, sizeof line,
                    "bench model-delta: %3d%% (%zu/%zu tensors, %s of %s raw), delta %s so far, "
                    "%.0f s",
                    (next_decile - 1) * 10, i + 1, specs.size(),
                    human_bytes(2 * done_elements).c_str(), human_bytes(2 * elements).c_str(),
                    human_bytes(delta_bytes).c_str(), now_s() - t_start);
      c.log(line);
    }
  }

  const std::vector<uint64_t> part_sizes = parts.finish();
  std::vector<nccl::SchedulePart> schedule_parts;
  schedule_parts.reserve(part_sizes.size());
  uint64_t journal_bytes = 0;
  for (size_t k = 0; k < part_sizes.size(); ++k) {
    schedule_parts.push_back({"delta part " + std::to_string(k), part_sizes[k], 0});
    journal_bytes += part_sizes[k];
  }
  nccl::ScheduleOptions so;
  so.bucket_bytes = c.nccl_bucket_bytes;
  so.buffers = c.nccl_buffers;
  so.ranks = 1;
  ASSIGN_OR_RETURN(const nccl::BroadcastSchedule schedule, plan_broadcasts(schedule_parts, so));
  const double seconds = now_s() - t_start;
  if (c.log) {
    c.log("bench model-delta: 100% (" + std::to_string(specs.size()) + " tensors), " +
          std::to_string(static_cast<int>(seconds)) + " s");
  }

  const uint64_t raw = 2 * elements;
  nlohmann::json chunk_modes = nlohmann::json::object();
  for (size_t m = 0; m < modes.size(); ++m) {
    chunk_modes[chunk_mode_name(static_cast<ChunkMode>(m))] = modes[m];
  }
  nlohmann::json j{
      {"family", std::string(model_family_name(family))},
      {"scale", c.scale},
      {"density", c.density},
      {"measured_density", elements == 0 ? 0.0 : static_cast<double>(changed) / elements},
      {"seed", c.seed},
      {"threads", c.threads},
      {"tensors", specs.size()},
      {"elements", elements},
      {"changed", changed},
      {"records", records},
      {"raw_bf16_bytes", raw},
      {"delta_bytes", delta_bytes},
      {"ratio", raw == 0 ? 0.0 : static_cast<double>(delta_bytes) / raw},
      {"bits_per_change", changed == 0 ? 0.0 : 8.0 * delta_bytes / changed},
      {"chunk_modes", chunk_modes},
      {"journal_part_bytes", c.part_bytes},
      {"journal_parts", part_sizes.size()},
      {"journal_delta_bytes", journal_bytes},
      {"nccl_buckets", schedule.buckets.size()},
      {"nccl_bucket_bytes", c.nccl_bucket_bytes},
      {"nccl_buffers", c.nccl_buffers},
      {"nccl_broadcast_bytes", schedule.total_bytes},
      {"verified_tensors", verified},
      {"generate_s", generate_s},
      {"checksum_s", checksum_s},
      {"encode_s", encode_s},
      {"verify_s", verify_s},
      {"seconds", seconds},
  };
  if (c.memcmp_reference) {
    j["memcmp_s"] = memcmp_s;
    j["encode_vs_memcmp"] = memcmp_s > 0 ? encode_s / memcmp_s : 0.0;
  }
  return j;
}

}  // namespace weightcast
