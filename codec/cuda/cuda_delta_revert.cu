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

  uint8_t* payload = nullptr;
  ASSIGN_OR_RETURN(payload, ws->buffer(Workspace::kPayload, plan.payload_bytes, who));
  WC_CUDA_TRY(cudaMemcpyAsync(payload, plan.record_start, plan.payload_bytes,
                              cudaMemcpyHostToDevice, ws->stream()),
              who);
  ASSIGN_OR_RETURN(const LaunchBuffers b, stage_launch(ws, plan, es, who));
  uint8_t* const host = b.host;
  uint8_t* const undo_dev = b.undo;
  const size_t jobs_bytes = b.jobs_bytes, results_bytes = b.results_bytes;
  ChunkJob* const dev_jobs = b.jobs;
  JobResult* const dev_results = b.results;
  unsigned long long* const dev_errors = b.errors;
  uint32_t* const pos32 = b.positions;
  uint32_t* const val32 = b.values;
  RETURN_IF_ERROR(launch_decode(payload, dev_jobs, n_jobs, es, pos32, val32, dev_results,
                                dev_errors, *ws, who));
  WC_CUDA_TRY(cudaMemcpyAsync(host + jobs_bytes, dev_results,
                              results_bytes + 2 * sizeof(unsigned long long),
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
