// Exporting packed-expert state as per-expert tensors through the copy planner: a packed
// [E, ...] parameter and its optimizer moments (exp_avg, exp_avg_sq) become
// "<prefix>.<e>.<suffix>" tensors, the names a per-expert checkpoint or anchor needs. With
// coalescing each complete packed tensor is one transfer (the seed: 48 calls -> 6 on an
// eight-expert fixture); the bytes and names are those of the per-slice path.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/copy_planner.h"
#include "codec/tensor_bytes.h"
#include "transport/copy_executor.h"

namespace weightcast {

class ThreadPool;

struct PackedParameter {
  std::string prefix;  // "model.layers.0.mlp.experts"
  std::string suffix;  // "gate_up_proj"
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [E, ...]
  std::span<const uint8_t> master, exp_avg, exp_avg_sq;
};

struct ExpertExport {
  StagedCopies staged;                   // owns the bytes the tensors view
  std::vector<TensorBytesView> tensors;  // request order: state, parameter, expert
  CopyPlan plan;
};

// Exports `experts` (in that order; empty = all) of every parameter, for the master weights
// and both moments ("<name>", "optimizer.exp_avg.<name>", "optimizer.exp_avg_sq.<name>").
// `coalesce` false forces the per-slice path. With `staging`, the staged bytes live in buffers
// of that pool, returned to it when the ExpertExport is destroyed (so a training loop that
// exports every step reuses faulted-in memory). Errors name the parameter.
Result<ExpertExport> export_packed_experts(std::span<const PackedParameter> params,
                                           std::span<const uint32_t> experts, bool coalesce,
                                           ThreadPool* pool = nullptr,
                                           StagingPool* staging = nullptr);

}  // namespace weightcast
