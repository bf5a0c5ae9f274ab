// The kernels of delta apply and revert on the GPU (cuda_delta_apply.cu, cuda_delta_revert.cu)
// and the host-side plan of a record's chunks that both launch over. Include from .cu files only.
#pragma once

#include <cuda_runtime.h>
#include <cub/block/block_reduce.cuh>

#include <cstring>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/chunk_decode_hd.h"
#include "codec/cuda/cuda_chunk_decode.cuh"
#include "codec/cuda/cuda_support.h"
#include "codec/delta_format.h"
#include "codec/value_packing.h"

// Internal linkage: each including .cu file gets its own copy of the kernels (they are not
// relocatable device code across files).
namespace weightcast::cuda_codec::apply_kernels {
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

// One block per job (cuda_chunk_decode.cuh): the chunk's positions and values into scratch.
__global__ void decode_chunks_kernel(const uint8_t* payload, const ChunkJob* jobs,
                                     unsigned elem_size, uint32_t* positions, uint32_t* values,
                                     JobResult* results, unsigned long long* decode_error) {
  const uint32_t j = blockIdx.x;
  const ChunkJob job = jobs[j];
  hd::ChunkHead head;
  const hd::ChunkDecodeError e = chunk_decode::block_decode_chunk(
      payload + job.payload_offset, job.payload_bytes, job.length, elem_size,
      positions + job.scratch_offset, values + job.scratch_offset, &head);
  if (threadIdx.x != 0) return;
  results[j].changed = head.changed;
  results[j].mode = head.mode;
  if (e != hd::kDecodeOk) atomicMin(decode_error, (static_cast<unsigned long long>(j) << 8) | e);
}

Status launch_decode(const uint8_t* payload, const ChunkJob* jobs, uint32_t n_jobs, size_t es,
                     uint32_t* positions, uint32_t* values, JobResult* results,
                     unsigned long long* decode_error, const Workspace& ws,
                     const std::string& who) {
  if (n_jobs == 0) return ok_status();
  decode_chunks_kernel<<<n_jobs, chunk_decode::kDecodeThreads, 0, ws.stream()>>>(
      payload, jobs, static_cast<unsigned>(es), positions, values, results, decode_error);
  WC_CUDA_LAUNCHED("decode_chunks_kernel", who);
  return ok_status();
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

// The non-empty chunks of `record` that hold elements [first, first + count), in order, with
// their payload offsets from the first one's bytes (*record_start) and their scratch offsets.
struct ChunkPlan {
  std::vector<ChunkJob> jobs;
  const uint8_t* record_start = nullptr;
  uint64_t scratch_elements = 0;
  uint64_t payload_bytes = 0;  // from record_start to the end of the last job's bytes
};
inline ChunkPlan plan_chunk_jobs(const DeltaRecordView& record, uint64_t first, uint64_t count) {
  const DeltaRecordHeader& h = record.header;
  ChunkPlan plan;
  const uint32_t c0 = static_cast<uint32_t>((first - h.range_offset) / h.chunk_elements);
  const uint32_t c1 =
      count == 0
          ? c0
          : static_cast<uint32_t>((first + count - 1 - h.range_offset) / h.chunk_elements) + 1;
  for (uint32_t c = c0; c < c1; ++c) {
    const auto& bytes = record.chunks[c];
    if (bytes.empty()) continue;
    if (plan.record_start == nullptr) plan.record_start = bytes.data();
    ChunkJob job{};
    job.payload_offset = static_cast<uint64_t>(bytes.data() - plan.record_start);
    job.payload_bytes = bytes.size();
    job.global_start = h.range_offset + uint64_t{h.chunk_elements} * c;
    job.scratch_offset = plan.scratch_elements;
    job.length = h.chunk_length(c);
    job.chunk = c;
    plan.scratch_elements += job.length;
    plan.payload_bytes = job.payload_offset + job.payload_bytes;
    plan.jobs.push_back(job);
  }
  return plan;
}

// The buffers one launch over a plan's jobs uses, from the calling thread's workspace: on the
// device the jobs, their results and two error words (decode, apply) back to back, and the
// positions/values/undo scratch; `host` is pinned memory laid out like the first three.
struct LaunchBuffers {
  ChunkJob* jobs = nullptr;
  JobResult* results = nullptr;
  unsigned long long* errors = nullptr;
  uint8_t* host = nullptr;
  size_t jobs_bytes = 0;
  size_t results_bytes = 0;
  uint32_t* positions = nullptr;
  uint32_t* values = nullptr;
  uint8_t* undo = nullptr;
};

// Allocates them for `plan` and uploads the jobs and cleared error words on the workspace's
// stream (the caller synchronises later).
inline Result<LaunchBuffers> stage_launch(Workspace* ws, const ChunkPlan& plan, size_t es,
                                          const std::string& who) {
  const size_t n_jobs = plan.jobs.size();
  LaunchBuffers b;
  b.jobs_bytes = (n_jobs * sizeof(ChunkJob) + 63) / 64 * 64;
  b.results_bytes = (n_jobs * sizeof(JobResult) + 63) / 64 * 64;
  const size_t per_chunk_bytes = b.jobs_bytes + b.results_bytes + 64;
  uint8_t *per_chunk = nullptr, *positions = nullptr, *values = nullptr;
  ASSIGN_OR_RETURN(per_chunk, ws->buffer(Workspace::kPerChunk, per_chunk_bytes, who));
  ASSIGN_OR_RETURN(b.host, ws->buffer(Workspace::kPerChunkHost, per_chunk_bytes, who));
  ASSIGN_OR_RETURN(positions, ws->buffer(Workspace::kPositions, plan.scratch_elements * 4, who));
  ASSIGN_OR_RETURN(values, ws->buffer(Workspace::kValues, plan.scratch_elements * 4, who));
  ASSIGN_OR_RETURN(b.undo, ws->buffer(Workspace::kUndo, plan.scratch_elements * es, who));
  b.jobs = reinterpret_cast<ChunkJob*>(per_chunk);
  b.results = reinterpret_cast<JobResult*>(per_chunk + b.jobs_bytes);
  b.errors = reinterpret_cast<unsigned long long*>(per_chunk + b.jobs_bytes + b.results_bytes);
  b.positions = reinterpret_cast<uint32_t*>(positions);
  b.values = reinterpret_cast<uint32_t*>(values);
  std::memcpy(b.host, plan.jobs.data(), n_jobs * sizeof(ChunkJob));
  const unsigned long long no_errors[2] = {kNoError, kNoError};
  std::memcpy(b.host + b.jobs_bytes + b.results_bytes, no_errors, sizeof(no_errors));
  WC_CUDA_TRY(
      cudaMemcpyAsync(per_chunk, b.host, b.jobs_bytes, cudaMemcpyHostToDevice, ws->stream()), who);
  WC_CUDA_TRY(cudaMemcpyAsync(b.errors, b.host + b.jobs_bytes + b.results_bytes, sizeof(no_errors),
                              cudaMemcpyHostToDevice, ws->stream()),
              who);
  return b;
}

}  // namespace
}  // namespace weightcast::cuda_codec::apply_kernels
