// Sparse delta apply on the GPU, with apply_delta's guarantees (delta_apply.h):
//
//  1. the destination's checksum (tracked by the caller, or one checksum pass on the GPU) must
//     equal the base checksum: checked on the host before any kernel writes;
//  2. decode (one thread per chunk): hd::decode_chunk_hd validates every chunk and expands its
//     positions and values into scratch; any error is recorded (lowest chunk wins) and the
//     apply kernel then writes nothing at all;
//  3. apply (one block per chunk): add the differences (raw chunks: store the new values,
//     saving the old ones), summing the checksum change per chunk;
//  4. on the host: the new checksum must equal the target (and a whole destination must see
//     the record's change count); otherwise revert (one block per chunk) undoes every write.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "codec/cuda/cuda_apply_kernels.cuh"
#include "codec/cuda_codec.h"

namespace weightcast::cuda_codec {

using namespace apply_kernels;

namespace {

// The old bits of every destination element of the raw chunks (the apply kernel saved them
// in the undo scratch), copied to the host for a later revert_delta.
Status keep_raw_undo(const std::vector<ChunkJob>& jobs, const JobResult* results,
                     const uint8_t* undo, size_t es, Workspace& ws, const std::string& who,
                     ApplyUndo* out) {
  out->raw.clear();
  std::vector<uint8_t> bytes;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (static_cast<ChunkMode>(results[j].mode) != ChunkMode::kRaw) continue;
    bytes.resize(size_t{jobs[j].length} * es);
    WC_CUDA_TRY(cudaMemcpyAsync(bytes.data(), undo + jobs[j].scratch_offset * es, bytes.size(),
                                cudaMemcpyDeviceToHost, ws.stream()),
                who);
    RETURN_IF_ERROR(ws.sync(who + " (undo of raw chunks)"));
    ApplyUndo::RawChunk raw;
    raw.chunk = jobs[j].chunk;
    for (uint32_t p = 0; p < jobs[j].length; ++p) {
      uint32_t v = 0;
      std::memcpy(&v, bytes.data() + size_t{p} * es, es);
      raw.positions.push_back(p);
      raw.bits.push_back(v);
    }
    out->raw.push_back(std::move(raw));
  }
  return ok_status();
}

}  // namespace

Result<ApplyReport> apply_delta(const DeltaRecordView& record, const TensorRef& dest,
                                const ApplyOptions& o, const uint8_t* device_record) {
  const DeltaRecordHeader& h = record.header;
  const std::string who = "tensor '" + h.name + "'";
  ASSIGN_OR_RETURN(const ApplyRequest req, check_apply_request(record, dest, o));
  ASSIGN_OR_RETURN(const DeviceView view, describe_device_view(dest));
  const size_t es = dtype_size(h.dtype);
  if (es != 1 && es != 2 && es != 4) {
    return invalid_argument(who + ": the delta codec takes 1-, 2- or 4-byte elements");
  }
  Workspace* ws = nullptr;
  ASSIGN_OR_RETURN(ws, Workspace::get(dest.device, who));

  // The chunks holding destination elements, and where their bytes and scratch go.
  const ChunkPlan plan = plan_chunk_jobs(record, req.first, req.count);
  const std::vector<ChunkJob>& jobs = plan.jobs;
  const uint8_t* record_start = plan.record_start;

  // 1. Refuse a wrong base before anything is written.
  uint64_t current = 0;
  if (o.current_checksum) {
    current = *o.current_checksum;
  } else {
    ASSIGN_OR_RETURN(current, cuda_codec::checksum_view(dest, req.first));
  }
  if (current != req.expected_base) return base_mismatch(h, current, req.expected_base);
  ApplyReport report;
  report.checksum = current;
  const auto n_jobs = static_cast<uint32_t>(jobs.size());
  if (n_jobs == 0) {
    if (req.whole && h.changed != 0) {
      return data_loss(who + ": the record claims " + std::to_string(h.changed) +
                       " changed elements but its chunks hold 0");
    }
    if (report.checksum != req.expected_target) {
      return target_mismatch(h, report.checksum, req.expected_target);
    }
    return report;
  }

  // Device copies of the chunk bytes (unless given), the jobs, and scratch.
  uint8_t* payload = nullptr;
  const uint64_t payload_bytes = plan.payload_bytes;
  if (device_record != nullptr) {
    // The chunks lie back to back after the record's header and chunk table.
    uint64_t first_job_offset = record.payload_offset;
    for (uint32_t c = 0; c < jobs[0].chunk; ++c) first_job_offset += record.chunks[c].size();
    payload = const_cast<uint8_t*>(device_record) + first_job_offset;
  } else {
    ASSIGN_OR_RETURN(payload, ws->buffer(Workspace::kPayload, payload_bytes, who));
    WC_CUDA_TRY(
        cudaMemcpyAsync(payload, record_start, payload_bytes, cudaMemcpyHostToDevice, ws->stream()),
        who);
  }
  ASSIGN_OR_RETURN(const LaunchBuffers b, stage_launch(ws, plan, es, who));
  uint8_t* const host = b.host;
  uint8_t* const undo = b.undo;
  const size_t jobs_bytes = b.jobs_bytes, results_bytes = b.results_bytes;
  ChunkJob* const dev_jobs = b.jobs;
  JobResult* const dev_results = b.results;
  unsigned long long* const dev_errors = b.errors;
  constexpr size_t kErrorBytes = 2 * sizeof(unsigned long long);

  // 2-3. Decode, then apply.
  uint32_t* const pos32 = b.positions;
  uint32_t* const val32 = b.values;
  RETURN_IF_ERROR(launch_decode(payload, dev_jobs, n_jobs, es, pos32, val32, dev_results,
                                dev_errors, *ws, who));
  const Destination d{dest.first_byte(), view, req.first, req.count};
  // From the apply launch on, memory may have changed: a failure before the verdict is known
  // still tries the revert (which undoes exactly what the apply kernel wrote, or nothing when
  // it returned early), so that the destination is left as it was whenever CUDA allows.
  auto undo_then = [&](Status failure) -> Status {
    (void)launch_apply_any(es, true, payload, dev_jobs, n_jobs, pos32, val32, undo, d, dev_results,
                           dev_errors, dev_errors + 1, *ws, who);
    (void)ws->sync(who + " (revert after a failure)");
    return failure;
  };
  Status launched = launch_apply_any(es, false, payload, dev_jobs, n_jobs, pos32, val32, undo, d,
                                     dev_results, dev_errors, dev_errors + 1, *ws, who);
  if (!launched.ok()) return undo_then(launched);
  if (const cudaError_t e =
          cudaMemcpyAsync(host + jobs_bytes, dev_results, results_bytes + kErrorBytes,
                          cudaMemcpyDeviceToHost, ws->stream());
      e != cudaSuccess) {
    return undo_then(cuda_error("cudaMemcpyAsync (apply results)", who, e));
  }
  if (Status synced = ws->sync(who + " (decode and apply)"); !synced.ok()) {
    return undo_then(synced);
  }
  const auto* results = reinterpret_cast<const JobResult*>(host + jobs_bytes);
  unsigned long long errors[2];
  std::memcpy(errors, host + jobs_bytes + results_bytes, sizeof(errors));
  if (errors[0] != kNoError) {  // nothing was written
    const auto job = static_cast<uint32_t>(errors[0] >> 8);
    return data_loss(who + " chunk " + std::to_string(jobs[job].chunk) + ": " +
                     hd::chunk_decode_error_text(static_cast<uint8_t>(errors[0] & 0xFF)));
  }

  // 4. Verify; revert on any failure.
  Status failure;
  if (errors[1] != kNoError) {
    const auto job = static_cast<uint32_t>(errors[1] >> 8);
    failure = data_loss(who + " chunk " + std::to_string(jobs[job].chunk) + ": " +
                        hd::chunk_decode_error_text(static_cast<uint8_t>(errors[1] & 0xFF)));
  }
  for (uint32_t j = 0; j < n_jobs; ++j) {
    report.checksum += results[j].checksum_change;
    report.changed += results[j].written;
  }
  if (failure.ok() && req.whole && report.changed != h.changed) {
    failure = data_loss(who + ": the record claims " + std::to_string(h.changed) +
                        " changed elements but its chunks hold " + std::to_string(report.changed));
  }
  if (failure.ok() && report.checksum != req.expected_target) {
    failure = target_mismatch(h, report.checksum, req.expected_target);
  }
  if (!failure.ok()) {
    RETURN_IF_ERROR(launch_apply_any(es, true, payload, dev_jobs, n_jobs, pos32, val32, undo, d,
                                     dev_results, dev_errors, dev_errors + 1, *ws, who));
    RETURN_IF_ERROR(ws->sync(who + " (revert)"));
    return failure;
  }
  if (o.undo != nullptr) RETURN_IF_ERROR(keep_raw_undo(jobs, results, undo, es, *ws, who, o.undo));
  return report;
}

}  // namespace weightcast::cuda_codec
