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
#include <cub/block/block_reduce.cuh>

#include <cstring>
#include <vector>

#include "codec/checksum.h"
#include "codec/chunk_decode_hd.h"
#include "codec/cuda/cuda_support.h"
#include "codec/cuda_codec.h"
#include "codec/value_packing.h"

namespace weightcast::cuda_codec {
namespace {

constexpr int kApplyThreads = 128;
constexpr unsigned long long kNoError = ~0ull;

// One non-empty chunk of the record that holds destination elements.
struct ChunkJob {
  uint64_t payload_offset;  // of the chunk's bytes in the device copy
  uint64_t payload_bytes;
  uint64_t global_start;    // global index of the chunk's element 0
  uint64_t scratch_offset;  // of its positions/values (and undo) in scratch, in elements
  uint32_t length;
  uint32_t chunk;
};

struct JobResult {
  unsigned long long checksum_change;
  unsigned long long written;
  uint32_t changed;  // the chunk header's count (after decoding)
  uint8_t mode;
};

struct Destination {
  uint8_t* base;  // first element
  DeviceView view;
  uint64_t first;  // global index of element 0
  uint64_t count;
};

__global__ void decode_chunks_kernel(const uint8_t* payload, const ChunkJob* jobs, uint32_t n_jobs,
                                     unsigned elem_size, uint32_t* positions, uint32_t* values,
                                     JobResult* results, unsigned long long* decode_error) {
  const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n_jobs) return;
  const ChunkJob job = jobs[j];
  hd::ChunkHead head;
  const hd::ChunkDecodeError e = hd::decode_chunk_hd(
      payload + job.payload_offset, job.payload_bytes, job.length, elem_size, job.length,
      positions + job.scratch_offset, values + job.scratch_offset, &head);
  results[j].changed = head.changed;
  results[j].mode = head.mode;
  if (e != hd::kDecodeOk) atomicMin(decode_error, (static_cast<unsigned long long>(j) << 8) | e);
}

template <typename U>
__device__ inline U* element_at(const Destination& d, uint64_t global) {
  return reinterpret_cast<U*>(d.base) + d.view.offset_of(global - d.first);
}

template <typename U>
__global__ void apply_chunks_kernel(const uint8_t* payload, const ChunkJob* jobs,
                                    const uint32_t* positions, const uint32_t* values, U* undo,
                                    Destination d, JobResult* results,
                                    const unsigned long long* decode_error,
                                    unsigned long long* apply_error) {
  if (*decode_error != kNoError) return;  // a corrupt chunk: nothing is written anywhere
  constexpr unsigned w = sizeof(U) * 8;
  using Reduce = cub::BlockReduce<unsigned long long, kApplyThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const ChunkJob job = jobs[blockIdx.x];
  const JobResult r = results[blockIdx.x];
  const uint64_t end = d.first + d.count;
  unsigned long long sum = 0, written = 0;
  if (static_cast<ChunkMode>(r.mode) == ChunkMode::kRaw) {
    const uint8_t* raw = payload + job.payload_offset + kChunkHeaderBytes;
    for (uint32_t p = threadIdx.x; p < job.length; p += blockDim.x) {
      const uint64_t g = job.global_start + p;
      if (g < d.first || g >= end) continue;
      U* at = element_at<U>(d, g);
      const U old = *at;
      U now;
      memcpy(&now, raw + uint64_t{p} * sizeof(U), sizeof(U));
      undo[job.scratch_offset + p] = old;
      if (now == old) continue;
      *at = now;
      sum += checksum_change(g, old, now, sizeof(U));
      ++written;
    }
  } else {
    const uint32_t* pos = positions + job.scratch_offset;
    const uint32_t* val = values + job.scratch_offset;
    for (uint32_t k = threadIdx.x; k < r.changed; k += blockDim.x) {
      const uint64_t g = job.global_start + pos[k];
      if (g < d.first || g >= end) continue;
      U* at = element_at<U>(d, g);
      const U old = *at;
      const U now = static_cast<U>(old + static_cast<U>(diff_from_value(val[k], w)));
      *at = now;
      sum += checksum_change(g, old, now, sizeof(U));
      ++written;
    }
  }
  const unsigned long long block_sum = Reduce(tmp).Sum(sum);
  __syncthreads();
  const unsigned long long block_written = Reduce(tmp).Sum(written);
  if (threadIdx.x == 0) {
    results[blockIdx.x].checksum_change = block_sum;
    results[blockIdx.x].written = block_written;
    const bool whole_chunk = job.global_start >= d.first && job.global_start + job.length <= end;
    if (static_cast<ChunkMode>(r.mode) == ChunkMode::kRaw && whole_chunk &&
        block_written != r.changed) {
      atomicMin(apply_error,
                (static_cast<unsigned long long>(blockIdx.x) << 8) | hd::kRawChangeCountMismatch);
    }
  }
}

template <typename U>
__global__ void revert_chunks_kernel(const ChunkJob* jobs, const uint32_t* positions,
                                     const uint32_t* values, const U* undo, Destination d,
                                     const JobResult* results) {
  constexpr unsigned w = sizeof(U) * 8;
  const ChunkJob job = jobs[blockIdx.x];
  const JobResult r = results[blockIdx.x];
  const uint64_t end = d.first + d.count;
  if (static_cast<ChunkMode>(r.mode) == ChunkMode::kRaw) {
    for (uint32_t p = threadIdx.x; p < job.length; p += blockDim.x) {
      const uint64_t g = job.global_start + p;
      if (g >= d.first && g < end) *element_at<U>(d, g) = undo[job.scratch_offset + p];
    }
    return;
  }
  const uint32_t* pos = positions + job.scratch_offset;
  const uint32_t* val = values + job.scratch_offset;
  for (uint32_t k = threadIdx.x; k < r.changed; k += blockDim.x) {
    const uint64_t g = job.global_start + pos[k];
    if (g < d.first || g >= end) continue;
    U* at = element_at<U>(d, g);
    *at = static_cast<U>(*at - static_cast<U>(diff_from_value(val[k], w)));
  }
}

template <typename U>
Status launch_apply(bool revert, const uint8_t* payload, const ChunkJob* jobs, uint32_t n_jobs,
                    const uint32_t* positions, const uint32_t* values, uint8_t* undo,
                    const Destination& d, JobResult* results,
                    const unsigned long long* decode_error, unsigned long long* apply_error,
                    const Workspace& ws, const std::string& who) {
  if (revert) {
    revert_chunks_kernel<U><<<n_jobs, kApplyThreads, 0, ws.stream()>>>(
        jobs, positions, values, reinterpret_cast<const U*>(undo), d, results);
    WC_CUDA_LAUNCHED("revert_chunks_kernel", who);
  } else {
    apply_chunks_kernel<U><<<n_jobs, kApplyThreads, 0, ws.stream()>>>(
        payload, jobs, positions, values, reinterpret_cast<U*>(undo), d, results, decode_error,
        apply_error);
    WC_CUDA_LAUNCHED("apply_chunks_kernel", who);
  }
  return ok_status();
}

Status launch_apply_any(size_t es, bool revert, const uint8_t* payload, const ChunkJob* jobs,
                        uint32_t n_jobs, const uint32_t* positions, const uint32_t* values,
                        uint8_t* undo, const Destination& d, JobResult* results,
                        const unsigned long long* decode_error, unsigned long long* apply_error,
                        const Workspace& ws, const std::string& who) {
  switch (es) {
    case 1:
      return launch_apply<uint8_t>(revert, payload, jobs, n_jobs, positions, values, undo, d,
                                   results, decode_error, apply_error, ws, who);
    case 2:
      return launch_apply<uint16_t>(revert, payload, jobs, n_jobs, positions, values, undo, d,
                                    results, decode_error, apply_error, ws, who);
    default:
      return launch_apply<uint32_t>(revert, payload, jobs, n_jobs, positions, values, undo, d,
                                    results, decode_error, apply_error, ws, who);
  }
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
  const uint32_t c0 = static_cast<uint32_t>((req.first - h.range_offset) / h.chunk_elements);
  const uint32_t c1 =
      req.count == 0
          ? c0
          : static_cast<uint32_t>((req.first + req.count - 1 - h.range_offset) / h.chunk_elements) +
                1;
  std::vector<ChunkJob> jobs;
  const uint8_t* record_start = nullptr;
  uint64_t scratch_elements = 0, span_end = 0;
  for (uint32_t c = c0; c < c1; ++c) {
    const auto& bytes = record.chunks[c];
    if (bytes.empty()) continue;
    if (record_start == nullptr) record_start = bytes.data();
    ChunkJob job{};
    job.payload_offset = static_cast<uint64_t>(bytes.data() - record_start);
    job.payload_bytes = bytes.size();
    job.global_start = h.range_offset + uint64_t{h.chunk_elements} * c;
    job.scratch_offset = scratch_elements;
    job.length = h.chunk_length(c);
    job.chunk = c;
    scratch_elements += job.length;
    span_end = job.payload_offset + job.payload_bytes;
    jobs.push_back(job);
  }

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
  uint8_t *payload = nullptr, *per_chunk = nullptr, *host = nullptr, *positions = nullptr,
          *values = nullptr, *undo = nullptr;
  const uint64_t payload_bytes = span_end;
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
  const size_t jobs_bytes = (n_jobs * sizeof(ChunkJob) + 63) / 64 * 64;
  const size_t results_bytes = (n_jobs * sizeof(JobResult) + 63) / 64 * 64;
  const size_t per_chunk_bytes = jobs_bytes + results_bytes + 64;
  ASSIGN_OR_RETURN(per_chunk, ws->buffer(Workspace::kPerChunk, per_chunk_bytes, who));
  ASSIGN_OR_RETURN(host, ws->buffer(Workspace::kPerChunkHost, per_chunk_bytes, who));
  ASSIGN_OR_RETURN(positions, ws->buffer(Workspace::kPositions, scratch_elements * 4, who));
  ASSIGN_OR_RETURN(values, ws->buffer(Workspace::kValues, scratch_elements * 4, who));
  ASSIGN_OR_RETURN(undo, ws->buffer(Workspace::kUndo, scratch_elements * es, who));
  auto* dev_jobs = reinterpret_cast<ChunkJob*>(per_chunk);
  auto* dev_results = reinterpret_cast<JobResult*>(per_chunk + jobs_bytes);
  auto* dev_errors = reinterpret_cast<unsigned long long*>(per_chunk + jobs_bytes + results_bytes);
  std::memcpy(host, jobs.data(), n_jobs * sizeof(ChunkJob));
  const unsigned long long no_errors[2] = {kNoError, kNoError};
  std::memcpy(host + jobs_bytes + results_bytes, no_errors, sizeof(no_errors));
  WC_CUDA_TRY(cudaMemcpyAsync(per_chunk, host, jobs_bytes, cudaMemcpyHostToDevice, ws->stream()),
              who);
  WC_CUDA_TRY(cudaMemcpyAsync(dev_errors, host + jobs_bytes + results_bytes, sizeof(no_errors),
                              cudaMemcpyHostToDevice, ws->stream()),
              who);

  // 2-3. Decode, then apply.
  auto* pos32 = reinterpret_cast<uint32_t*>(positions);
  auto* val32 = reinterpret_cast<uint32_t*>(values);
  decode_chunks_kernel<<<(n_jobs + 31) / 32, 32, 0, ws->stream()>>>(
      payload, dev_jobs, n_jobs, static_cast<unsigned>(es), pos32, val32, dev_results, dev_errors);
  WC_CUDA_LAUNCHED("decode_chunks_kernel", who);
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
          cudaMemcpyAsync(host + jobs_bytes, dev_results, results_bytes + sizeof(no_errors),
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
  return report;
}

}  // namespace weightcast::cuda_codec
