// `weightcast bench model-delta`: the bytes one version's delta moves for a whole
// synthetic MoE model (codec/workload/model_shapes.h) against its raw bf16 bytes, at full scale on
// a machine with far less memory than the model.
//
// Tensors are streamed one at a time in checkpoint order: each is generated as the synthetic
// publisher generates version 0 and steps it to version 1 (src/daemon/synthetic_model.h: tensor
// i seeded seed * 7919 + i, lr = calibrate_lr(density, seed) * sigma, step seed
// seed * 1000003 + 1), the delta record is encoded with the CPU encoder (byte-identical to the
// CUDA one), its size is summed and the buffers are reused for the next tensor, so peak memory
// is set by the largest tensor (about 12 bytes per element of it) rather than the model.
//
// Records are grouped into delta parts the way the journal does (transport/fs/delta_step.h:
// records of changed tensors back to back after a 16-byte header, a new part when the next
// record would pass part_bytes), and those parts are planned into NCCL broadcast buckets with
// nccl::plan_broadcasts, all owned by rank 0.
//
// Every verify_every-th tensor (and the last) is checked: its record is parsed and applied to
// a copy of the base, which must then equal the new version byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "codec/base/status.h"

namespace weightcast {

struct ModelDeltaBenchmarkConfig {
  std::string family = "qwen3-30b-a3b";  // model_family_from_name
  double scale = 1.0;                    // model_layer_list's scale, > 0
  double density = 0.01;                 // in (0, 0.9]
  size_t threads = 2;                    // generation, checksum and encode of each tensor
  uint64_t seed = 1;
  uint64_t verify_every = 500;                     // >= 1
  uint64_t part_bytes = uint64_t{64} << 20;        // journal delta part size (DeltaPartOptions)
  uint64_t nccl_bucket_bytes = uint64_t{1} << 30;  // ScheduleOptions defaults
  uint32_t nccl_buffers = 2;
  // Also time memcmp of each base against an identical copy, the repo's full-scan reference
  // (costs one more copy of each tensor).
  bool memcmp_reference = true;
  // Progress lines (about every 10 % of the elements); none when empty.
  std::function<void(const std::string&)> log;
};

// Runs the benchmark and returns one JSON object with at least family, scale, density,
// tensors, elements, raw_bf16_bytes (2 * elements), delta_bytes (the records of changed
// tensors), ratio (delta_bytes / raw_bf16_bytes), nccl_buckets, nccl_bucket_bytes and
// seconds. Fails naming the tensor when a verified record does not reproduce its new version,
// and on invalid options.
Result<nlohmann::json> run_model_delta_benchmark(const ModelDeltaBenchmarkConfig& config);

}  // namespace weightcast
