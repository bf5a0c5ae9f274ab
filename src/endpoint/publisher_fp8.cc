// FP8 groups (`fp8` in the group config; docs/ARCHITECTURE.md §4 "FP8"): a selected tensor is
// published as its block-FP8 pair, float8_e4m3fn values under its own name and the fp32
// `<name>_scale_inv` grid (codec/fp8_selection.h). The trainer's matrix stays the source and
// is never copied whole: each publication quantises it in bands of 128-row blocks into the
// bounded staging buffer, and publisher_staged.cc diffs each band against the snapshot of the
// quantised bytes, so the delta, the checksums and the anchors are of what the engine holds.
// The scale grids are small and kept whole; they are read in place as host tensors. A source in
// CUDA memory is quantised on its GPU (cuda_codec.h), so only the FP8 bytes cross to the host.
#include <algorithm>
#include <cstring>

#include "codec/base/allocation.h"
#include "codec/checksum.h"
#include "codec/cuda_codec.h"
#include "codec/fp8_quantize.h"
#include "src/endpoint/publisher.h"

namespace weightcast {
namespace {

// Source bytes quantised per piece by the FP8 guard (whole 128-row bands, at least one).
constexpr int64_t kFp8ChecksumPieceBytes = int64_t{4} << 20;

}  // namespace

Status Publisher::register_fp8(const TensorRef& ref, TensorUpdates updates) {
  RETURN_IF_ERROR(
      check_fp8_source(ref.name, ref.dtype, ref.shape, "narrow the group config's fp8.quantize"));
  const std::string scale_name = fp8_scale_name(ref.name);
  for (const auto& t : tensors_) {
    if (t.name == scale_name) {
      return invalid_argument("tensor '" + ref.name +
                              "' is quantised to FP8, and its scale name '" + scale_name +
                              "' is a registered tensor's");
    }
  }
  const int64_t rows = ref.shape[0], cols = ref.shape[1];
  Fp8Source source;
  source.source = ref;
  source.scale = tensors_.size() + 1;  // right after the values (begin_step relies on it)
  ASSIGN_OR_RETURN(
      source.scale_inv,
      allocate_or_status(
          static_cast<uint64_t>(fp8_scale_rows(rows) * fp8_scale_cols(cols)) * sizeof(float),
          "the FP8 scales of tensor '" + ref.name + "'", [&] {
            return std::vector<float>(
                static_cast<size_t>(fp8_scale_rows(rows) * fp8_scale_cols(cols)));
          }));
  // The values: read only through quantize_rows (data stays null, so nothing else can).
  TensorRef values;
  values.name = ref.name;
  values.dtype = DType::kF8E4M3FN;
  values.shape = ref.shape;
  TensorRef scales = TensorRef::contiguous(scale_name, DType::kF32, source.scale_inv.data(),
                                           static_cast<int64_t>(source.scale_inv.size()));
  scales.shape = {fp8_scale_rows(rows), fp8_scale_cols(cols)};
  fp8_of_.resize(tensors_.size(), -1);
  fp8_of_.push_back(static_cast<int>(fp8_sources_.size()));
  fp8_of_.push_back(-1);
  tensors_.push_back(std::move(values));
  tensors_.push_back(std::move(scales));
  for (int k = 0; k < 2; ++k) {
    updates_.push_back(updates);
    live_checksums_.emplace_back();
  }
  fp8_sources_.push_back(std::move(source));
  return ok_status();
}

bool Publisher::read_in_place(size_t i) const {
  const TensorRef& t = tensors_[i];
  const bool fp8_values = i < fp8_of_.size() && fp8_of_[i] >= 0;
  return !fp8_values && t.memory != MemoryKind::kCuda && t.is_contiguous();
}

Status Publisher::quantize_rows(size_t i, int64_t first_row, int64_t rows, std::span<uint8_t> out,
                                float* grid) {
  Fp8Source& f = fp8_sources_[static_cast<size_t>(fp8_of_[i])];
  if (grid == nullptr) grid = f.scale_inv.data();
  const int64_t cols = f.source.shape[1];
  if (first_row % kFp8Block != 0 || out.size() != static_cast<size_t>(rows * cols)) {
    return internal_error("FP8 band of tensor '" + f.source.name + "' at row " +
                          std::to_string(first_row) + " is not whole blocks");
  }
  const TensorRef band = f.source.rows(first_row, rows);
  const int64_t grid_cols = fp8_scale_cols(cols);
  if (band.memory == MemoryKind::kCuda) {
    // Quantised on its GPU: only the values and the scales cross to the host.
    return cuda_codec::quantize_fp8_blocks(band, out,
                                           {grid + (first_row / kFp8Block) * grid_cols,
                                            static_cast<size_t>(fp8_scale_rows(rows) * grid_cols)});
  }
  // Each block row of the band on the pool: its values and its row of the scale grid.
  const int64_t block_rows = fp8_scale_rows(rows);
  std::vector<Status> results(static_cast<size_t>(block_rows), ok_status());
  pool_->parallel_for(static_cast<size_t>(block_rows), [&](size_t b) {
    const int64_t r0 = static_cast<int64_t>(b) * kFp8Block;
    const int64_t n = std::min(kFp8Block, rows - r0);
    const TensorRef block = band.rows(r0, n);
    float* scales = grid + (first_row / kFp8Block + r0 / kFp8Block) * grid_cols;
    results[b] = quantize_fp8_blocks(
        block, out.subspan(static_cast<size_t>(r0 * cols), static_cast<size_t>(n * cols)),
        {scales, static_cast<size_t>(grid_cols)});
  });
  for (auto& s : results) {
    if (!s.ok()) return s;
  }
  return ok_status();
}

Result<std::pair<uint64_t, uint64_t>> Publisher::fp8_live_checksums(size_t i, float* grid) {
  const Fp8Source& f = fp8_sources_[static_cast<size_t>(fp8_of_[i])];
  const int64_t rows = f.source.shape[0], cols = f.source.shape[1];
  const int64_t band_rows =
      std::max<int64_t>(1, kFp8ChecksumPieceBytes / std::max<int64_t>(1, cols) / kFp8Block) *
      kFp8Block;
  ASSIGN_OR_RETURN(std::vector<uint8_t> q,
                   allocate_bytes(static_cast<uint64_t>(std::min(rows, band_rows) * cols),
                                  "the FP8 guard's buffer of tensor '" + f.source.name + "'"));
  uint64_t values = 0;
  for (int64_t r = 0; r < rows; r += band_rows) {
    const int64_t n = std::min(band_rows, rows - r);
    const std::span<uint8_t> piece(q.data(), static_cast<size_t>(n * cols));
    RETURN_IF_ERROR(quantize_rows(i, r, n, piece, grid));
    values +=
        checksum_range(piece.data(), 1, piece.size(), static_cast<uint64_t>(r * cols), pool_.get());
  }
  const uint64_t scales = checksum_range(grid ? grid : f.scale_inv.data(), sizeof(float),
                                         f.scale_inv.size(), 0, nullptr);
  return std::pair<uint64_t, uint64_t>{values, scales};
}

Result<PublishStep::Hooked> Publisher::begin_hooked_fp8(size_t i, uint64_t version) {
  Fp8Source& f = fp8_sources_[static_cast<size_t>(fp8_of_[i])];
  std::optional<uint64_t> values, scales;
  {
    std::lock_guard<std::mutex> lock(mu_);
    values = live_checksums_[i];
    scales = live_checksums_[f.scale];
  }
  if (!values || !scales) {
    // After a start or a refused step: the base is the quantisation of what the live matrix
    // holds now, and the published scales are brought to it (no publication reads them now).
    auto both = fp8_live_checksums(i, nullptr);
    if (!both.ok()) {
      return both.status().with_context("checksum of hooked FP8 tensor '" + f.source.name + "'");
    }
    values = both->first;
    scales = both->second;
  }
  PublishStep::Hooked h;
  h.tensor = i;
  h.live = f.source;
  ASSIGN_OR_RETURN(h.recorder, hooked_recorder(i, version, *values));
  h.fp8 = std::make_unique<PublishStep::Fp8Hooked>();
  h.fp8->scale_tensor = f.scale;
  ASSIGN_OR_RETURN(h.fp8->scales, hooked_recorder(f.scale, version, *scales));
  h.fp8->scale_inv = f.scale_inv.data();
  h.fp8->done.assign(static_cast<size_t>(fp8_scale_rows(f.source.shape[0])), 0);
  return h;
}

Status Publisher::guard_fp8(const PublishJob& job, const PublishStep::Hooked& h,
                            const std::vector<std::optional<EncodedDelta>>& records) {
  // The published scales may be read beside this guard: it quantises into a grid of its own.
  std::vector<float> grid(fp8_sources_[static_cast<size_t>(fp8_of_[h.tensor])].scale_inv.size());
  auto live = fp8_live_checksums(h.tensor, grid.data());
  if (!live.ok()) return refuse_step(job, live.status());
  const uint64_t values = records[h.tensor]->header.target_checksum;
  const uint64_t scales = records[h.fp8->scale_tensor]->header.target_checksum;
  if (live->first != values || live->second != scales) {
    return refuse_step(
        job, failed_precondition(
                 "FP8 tensor '" + h.live.name +
                 "' changed outside the step: the quantisation of the live matrix (values " +
                 std::to_string(live->first) + ", scales " + std::to_string(live->second) +
                 ") is not what the step's writes make (" + std::to_string(values) + ", " +
                 std::to_string(scales) + ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  live_checksums_[h.tensor] = values;
  live_checksums_[h.fp8->scale_tensor] = scales;
  return ok_status();
}

}  // namespace weightcast
