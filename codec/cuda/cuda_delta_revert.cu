// revert_delta on CUDA memory (delta_apply.h): undoes a successful apply of a record on the
// GPU that holds the destination. The chunks are decoded again from the record (every
// difference is subtracted) and the raw chunks' old bits, which the apply copied to the host
// (ApplyUndo), are written back, with the same kernels as the apply (cuda_apply_kernels.cuh).
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "codec/cuda/cuda_apply_kernels.cuh"
#include "codec/cuda_codec.h"

namespace weightcast::cuda_codec {

using namespace apply_kernels;

Status revert_delta(const DeltaRecordView& record, const TensorRef& dest, const ApplyUndo& undo,
                    const ApplyOptions& o) {
  const DeltaRecordHeader& h = record.header;
  const std::string who = "tensor '" + h.name + "' (revert)";
  RETURN_IF_ERROR(dest.validate());
  ASSIGN_OR_RETURN(const DeviceView view, describe_device_view(dest));
  const size_t es = dtype_size(h.dtype);
  if (es != 1 && es != 2 && es != 4) {
    return invalid_argument(who + ": the delta codec takes 1-, 2- or 4-byte elements");
  }
  const uint64_t first = o.dest_first_element.value_or(h.range_offset);
  const uint64_t count = dest.numel();
  const ChunkPlan plan = plan_chunk_jobs(record, first, count);
  const auto n_jobs = static_cast<uint32_t>(plan.jobs.size());
  if (n_jobs == 0) return ok_status();
  Workspace* ws = nullptr;
  ASSIGN_OR_RETURN(ws, Workspace::get(dest.device, who));

  uint8_t *payload = nullptr, *per_chunk = nullptr, *host = nullptr, *positions = nullptr,
          *values = nullptr, *undo_dev = nullptr;
  ASSIGN_OR_RETURN(payload, ws->buffer(Workspace::kPayload, plan.payload_bytes, who));
  WC_CUDA_TRY(cudaMemcpyAsync(payload, plan.record_start, plan.payload_bytes,
                              cudaMemcpyHostToDevice, ws->stream()),
              who);
  const size_t jobs_bytes = (n_jobs * sizeof(ChunkJob) + 63) / 64 * 64;
  const size_t results_bytes = (n_jobs * sizeof(JobResult) + 63) / 64 * 64;
  const size_t per_chunk_bytes = jobs_bytes + results_bytes + 64;
  ASSIGN_OR_RETURN(per_chunk, ws->buffer(Workspace::kPerChunk, per_chunk_bytes, who));
  ASSIGN_OR_RETURN(host, ws->buffer(Workspace::kPerChunkHost, per_chunk_bytes, who));
  ASSIGN_OR_RETURN(positions, ws->buffer(Workspace::kPositions, plan.scratch_elements * 4, who));
  ASSIGN_OR_RETURN(values, ws->buffer(Workspace::kValues, plan.scratch_elements * 4, who));
  ASSIGN_OR_RETURN(undo_dev, ws->buffer(Workspace::kUndo, plan.scratch_elements * es, who));
  auto* dev_jobs = reinterpret_cast<ChunkJob*>(per_chunk);
  auto* dev_results = reinterpret_cast<JobResult*>(per_chunk + jobs_bytes);
  auto* dev_errors = reinterpret_cast<unsigned long long*>(per_chunk + jobs_bytes + results_bytes);
  std::memcpy(host, plan.jobs.data(), n_jobs * sizeof(ChunkJob));
  const unsigned long long no_errors[2] = {kNoError, kNoError};
  std::memcpy(host + jobs_bytes + results_bytes, no_errors, sizeof(no_errors));
  WC_CUDA_TRY(
      cudaMemcpyAsync(per_chunk, host, per_chunk_bytes, cudaMemcpyHostToDevice, ws->stream()), who);
  auto* pos32 = reinterpret_cast<uint32_t*>(positions);
  auto* val32 = reinterpret_cast<uint32_t*>(values);
  decode_chunks_kernel<<<(n_jobs + 31) / 32, 32, 0, ws->stream()>>>(
      payload, dev_jobs, n_jobs, static_cast<unsigned>(es), pos32, val32, dev_results, dev_errors);
  WC_CUDA_LAUNCHED("decode_chunks_kernel", who);
  WC_CUDA_TRY(cudaMemcpyAsync(host + jobs_bytes, dev_results, results_bytes + sizeof(no_errors),
                              cudaMemcpyDeviceToHost, ws->stream()),
              who);
  RETURN_IF_ERROR(ws->sync(who + " (decode)"));
  unsigned long long errors[2];
  std::memcpy(errors, host + jobs_bytes + results_bytes, sizeof(errors));
  if (errors[0] != kNoError) {
    const auto job = static_cast<uint32_t>(errors[0] >> 8);
    return data_loss(who + " chunk " + std::to_string(plan.jobs[job].chunk) + ": " +
                     hd::chunk_decode_error_text(static_cast<uint8_t>(errors[0] & 0xFF)));
  }
  // The raw chunks' old bits go back into the undo scratch where the revert kernel reads them.
  const auto* results = reinterpret_cast<const JobResult*>(host + jobs_bytes);
  std::vector<std::vector<uint8_t>> staged;
  size_t next_raw = 0;
  for (uint32_t j = 0; j < n_jobs; ++j) {
    if (static_cast<ChunkMode>(results[j].mode) != ChunkMode::kRaw) continue;
    const ChunkJob& job = plan.jobs[j];
    while (next_raw < undo.raw.size() && undo.raw[next_raw].chunk < job.chunk) ++next_raw;
    if (next_raw == undo.raw.size() || undo.raw[next_raw].chunk != job.chunk) {
      return data_loss(who + " chunk " + std::to_string(job.chunk) +
                       ": a raw chunk without its undo cannot be reverted");
    }
    const ApplyUndo::RawChunk& raw = undo.raw[next_raw];
    std::vector<uint8_t> bytes(size_t{job.length} * es);
    for (size_t k = 0; k < raw.positions.size() && k < raw.bits.size(); ++k) {
      if (raw.positions[k] >= job.length) continue;
      std::memcpy(bytes.data() + size_t{raw.positions[k]} * es, &raw.bits[k], es);
    }
    WC_CUDA_TRY(cudaMemcpyAsync(undo_dev + job.scratch_offset * es, bytes.data(), bytes.size(),
                                cudaMemcpyHostToDevice, ws->stream()),
                who);
    staged.push_back(std::move(bytes));  // alive until the stream is synchronised
  }
  const Destination d{dest.first_byte(), view, first, count};
  RETURN_IF_ERROR(launch_apply_any(es, true, payload, dev_jobs, n_jobs, pos32, val32, undo_dev, d,
                                   dev_results, dev_errors, dev_errors + 1, *ws, who));
  return ws->sync(who);
}

}  // namespace weightcast::cuda_codec
