// Sparse delta encode on the GPU, byte-identical to encode_delta (delta_encoder.cc):
//
//  1. scan (one block per chunk): compare old and new 32 bytes per thread per tile, compact
//     the changed positions and their values (zigzag(new - old) - 1) in ascending order with a
//     block-wide prefix sum, and sum the chunk's checksum change (and, without a tracked base,
//     the old bytes' checksum part);
//  2. plan (one block per chunk, cuda_chunk_write.cuh): hd::plan_chunk's choice of mode and
//     widths, from sums reduced over the block;
//  3. the host reads the plans, lays out the chunk table and offsets;
//  4. write (one block per chunk, cuda_chunk_write.cuh): hd::write_chunk's bytes, each field
//     at its scanned offset, into the zeroed payload; the payload comes back to the host in one
//     copy and is framed by assemble_delta_record (header, chunk table, XXH3-64 trailer).
// Only the scan reads the tensors; at 1 % density everything after it touches ~1 % of them.
#include <cuda_runtime.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cstring>
#include <vector>

#include "codec/checksum.h"
#include "codec/chunk_plan_hd.h"
#include "codec/cuda/cuda_chunk_write.cuh"
#include "codec/cuda/cuda_support.h"
#include "codec/cuda_codec.h"
#include "codec/delta_format.h"
#include "codec/value_packing.h"

namespace weightcast::cuda_codec {
namespace {

constexpr int kScanThreads = 256;

struct ChunkScanResult {
  uint32_t changed;
  uint32_t pad;
  unsigned long long checksum_change;
  unsigned long long base_part;
};

// Element `j` of a 32-byte span held as two 16-byte vectors.
template <typename U>
__device__ inline U element(const uint4 (&v)[2], int j) {
  U e;
  memcpy(&e, reinterpret_cast<const uint8_t*>(&v[0]) + j * sizeof(U), sizeof(U));
  return e;
}

template <typename U>
__global__ void scan_chunks_kernel(const uint8_t* old_bytes, const uint8_t* new_bytes,
                                   uint64_t range_elements, uint32_t chunk_elements,
                                   uint64_t range_offset, bool aligned, bool want_base,
                                   uint32_t* positions, uint32_t* values,
                                   ChunkScanResult* results) {
  constexpr int kSpan = 32 / sizeof(U);  // elements per thread per tile
  constexpr unsigned w = sizeof(U) * 8;
  using Scan = cub::BlockScan<uint32_t, kScanThreads>;
  using Reduce = cub::BlockReduce<unsigned long long, kScanThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ typename Reduce::TempStorage reduce_tmp;
  __shared__ uint32_t running;

  const uint32_t c = blockIdx.x;
  const uint64_t start = uint64_t{c} * chunk_elements;
  const uint64_t left = range_elements - start;
  const uint32_t length = left < chunk_elements ? static_cast<uint32_t>(left) : chunk_elements;
  const uint64_t global0 = range_offset + start;
  uint32_t* pos_out = positions + start;
  uint32_t* val_out = values + start;
  if (threadIdx.x == 0) running = 0;
  __syncthreads();

  unsigned long long change_sum = 0, base_sum = 0;
  for (uint32_t t0 = 0; t0 < length; t0 += uint32_t{kScanThreads} * kSpan) {
    const uint32_t e0 = t0 + threadIdx.x * kSpan;
    uint4 ov[2] = {}, nv[2] = {};
    uint32_t valid = 0;
    if (e0 < length) {
      valid = length - e0 < uint32_t{kSpan} ? length - e0 : uint32_t{kSpan};
      const uint8_t* op = old_bytes + (start + e0) * sizeof(U);
      const uint8_t* np = new_bytes + (start + e0) * sizeof(U);
      if (aligned && valid == uint32_t{kSpan}) {
        ov[0] = reinterpret_cast<const uint4*>(op)[0];
        ov[1] = reinterpret_cast<const uint4*>(op)[1];
        nv[0] = reinterpret_cast<const uint4*>(np)[0];
        nv[1] = reinterpret_cast<const uint4*>(np)[1];
      } else {  // a chunk's tail or unaligned memory: element by element, constant bounds
#pragma unroll
        for (int j = 0; j < kSpan; ++j) {
          if (static_cast<uint32_t>(j) < valid) {
            U o, n;
            memcpy(&o, op + j * sizeof(U), sizeof(U));
            memcpy(&n, np + j * sizeof(U), sizeof(U));
            memcpy(reinterpret_cast<uint8_t*>(ov) + j * sizeof(U), &o, sizeof(U));
            memcpy(reinterpret_cast<uint8_t*>(nv) + j * sizeof(U), &n, sizeof(U));
          }
        }
      }
    }
    uint32_t mask = 0;
    uint64_t s = 0, wsum = 0;
#pragma unroll
    for (int j = 0; j < kSpan; ++j) {
      const U o = element<U>(ov, j), n = element<U>(nv, j);
      if (static_cast<uint32_t>(j) < valid) {
        if (o != n) mask |= 1u << j;
        if (want_base) {
          const uint32_t m = checksum_fmix32(static_cast<uint32_t>(o) ^ kChecksumSeed32);
          s += m;
          wsum += static_cast<uint64_t>(j + 1) * m;
        }
      }
    }
    if (want_base) base_sum += (global0 + e0) * s + wsum;
    uint32_t count = __popc(mask), before = 0, tile_total = 0;
    Scan(scan_tmp).ExclusiveSum(count, before, tile_total);
    uint32_t at = running + before;
    // j is a constant in each unrolled step, so the elements stay in registers.
#pragma unroll
    for (int j = 0; j < kSpan; ++j) {
      if (((mask >> j) & 1u) == 0) continue;
      const U o = element<U>(ov, j), n = element<U>(nv, j);
      pos_out[at] = e0 + j;
      val_out[at] = value_from_diff(static_cast<uint32_t>(static_cast<U>(n - o)), w);
      change_sum += (global0 + e0 + j + 1) *
                    (uint64_t{checksum_fmix32(static_cast<uint32_t>(n) ^ kChecksumSeed32)} -
                     uint64_t{checksum_fmix32(static_cast<uint32_t>(o) ^ kChecksumSeed32)});
      ++at;
    }
    __syncthreads();  // every thread has read `running` and scan_tmp
    if (threadIdx.x == 0) running += tile_total;
    __syncthreads();
  }
  const unsigned long long change_total = Reduce(reduce_tmp).Sum(change_sum);
  __syncthreads();
  const unsigned long long base_total = Reduce(reduce_tmp).Sum(base_sum);
  if (threadIdx.x == 0) {
    results[c].changed = running;
    results[c].checksum_change = change_total;
    results[c].base_part = base_total;
  }
}

template <typename U>
Status launch_scan(const uint8_t* old_b, const uint8_t* new_b, const DeltaRecordHeader& h,
                   bool aligned, bool want_base, uint32_t* positions, uint32_t* values,
                   ChunkScanResult* results, const Workspace& ws, const std::string& who) {
  scan_chunks_kernel<U><<<h.chunk_count(), kScanThreads, 0, ws.stream()>>>(
      old_b, new_b, h.range_elements, h.chunk_elements, h.range_offset, aligned, want_base,
      positions, values, results);
  WC_CUDA_LAUNCHED("scan_chunks_kernel", who);
  return ok_status();
}

Status check_encode_views(const TensorRef& o, const TensorRef& n, const EncodeOptions& opt,
                          const std::string& who) {
  for (const TensorRef* r : {&o, &n}) {
    RETURN_IF_ERROR(r->validate());
    if (r->memory != MemoryKind::kCuda || !r->is_contiguous()) {
      return invalid_argument(who + ": the CUDA encoder needs contiguous CUDA views; '" + r->name +
                              "' is not one");
    }
    if (r->dtype != opt.dtype) {
      return invalid_argument(who + ": view '" + r->name + "' is " +
                              std::string(dtype_name(r->dtype)) + ", the options say " +
                              std::string(dtype_name(opt.dtype)));
    }
  }
  if (o.device != n.device) {
    return invalid_argument(who + ": old version on cuda:" + std::to_string(o.device) +
                            ", new version on cuda:" + std::to_string(n.device));
  }
  if (o.numel() != n.numel()) {
    return invalid_argument(who + ": old version has " + std::to_string(o.numel()) +
                            " elements, new version " + std::to_string(n.numel()));
  }
  const size_t es = dtype_size(opt.dtype);
  if (es != 1 && es != 2 && es != 4) {
    return invalid_argument(who + ": the delta codec takes 1-, 2- or 4-byte elements, not " +
                            std::string(dtype_name(opt.dtype)));
  }
  return ok_status();
}

}  // namespace

Result<EncodedDelta> encode_delta(const TensorRef& old_view, const TensorRef& new_view,
                                  const EncodeOptions& o) {
  const std::string who = "tensor '" + o.name + "'";
  RETURN_IF_ERROR(check_encode_views(old_view, new_view, o, who));
  const size_t es = dtype_size(o.dtype);
  EncodedDelta out;
  ASSIGN_OR_RETURN(out.header, delta_header_for(o, old_view.numel()));
  DeltaRecordHeader& h = out.header;
  const uint32_t chunks = h.chunk_count();
  if (chunks == 0) {
    h.base_checksum = o.base_checksum.value_or(0);
    h.target_checksum = h.base_checksum;
    out.record = assemble_delta_record(h, std::vector<std::vector<uint8_t>>{});
    return out;
  }

  Workspace* ws = nullptr;
  ASSIGN_OR_RETURN(ws, Workspace::get(old_view.device, who));
  uint8_t *positions = nullptr, *values = nullptr, *per_chunk = nullptr, *host = nullptr;
  const size_t scratch = h.range_elements * sizeof(uint32_t);
  ASSIGN_OR_RETURN(positions, ws->buffer(Workspace::kPositions, scratch, who));
  ASSIGN_OR_RETURN(values, ws->buffer(Workspace::kValues, scratch, who));
  const size_t results_bytes = chunks * sizeof(ChunkScanResult);
  const size_t plans_at = (results_bytes + 63) / 64 * 64;
  const size_t plans_bytes = chunks * sizeof(hd::ChunkPlan);
  const size_t offsets_at = plans_at + (plans_bytes + 63) / 64 * 64;
  const size_t per_chunk_bytes = offsets_at + chunks * sizeof(uint64_t);
  ASSIGN_OR_RETURN(per_chunk, ws->buffer(Workspace::kPerChunk, per_chunk_bytes, who));
  ASSIGN_OR_RETURN(host, ws->buffer(Workspace::kPerChunkHost, per_chunk_bytes, who));
  auto* results = reinterpret_cast<ChunkScanResult*>(per_chunk);
  auto* plans = reinterpret_cast<hd::ChunkPlan*>(per_chunk + plans_at);
  auto* offsets = reinterpret_cast<uint64_t*>(per_chunk + offsets_at);

  const uint8_t* old_b = old_view.first_byte();
  const uint8_t* new_b = new_view.first_byte();
  const bool aligned = reinterpret_cast<uintptr_t>(old_b) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(new_b) % 16 == 0 &&
                       (uint64_t{h.chunk_elements} * es) % 32 == 0;
  const bool want_base = !o.base_checksum.has_value();
  auto* pos32 = reinterpret_cast<uint32_t*>(positions);
  auto* val32 = reinterpret_cast<uint32_t*>(values);
  switch (es) {
    case 1:
      RETURN_IF_ERROR(launch_scan<uint8_t>(old_b, new_b, h, aligned, want_base, pos32, val32,
                                           results, *ws, who));
      break;
    case 2:
      RETURN_IF_ERROR(launch_scan<uint16_t>(old_b, new_b, h, aligned, want_base, pos32, val32,
                                            results, *ws, who));
      break;
    default:
      RETURN_IF_ERROR(launch_scan<uint32_t>(old_b, new_b, h, aligned, want_base, pos32, val32,
                                            results, *ws, who));
      break;
  }
  chunk_write::plan_chunks_kernel<<<chunks, chunk_write::kWriteThreads, 0, ws->stream()>>>(
      pos32, val32, results, h.range_elements, h.chunk_elements, static_cast<unsigned>(es),
      o.allowed_modes, plans);
  WC_CUDA_LAUNCHED("plan_chunks_kernel", who);
  WC_CUDA_TRY(cudaMemcpyAsync(host, per_chunk, offsets_at, cudaMemcpyDeviceToHost, ws->stream()),
              who);
  RETURN_IF_ERROR(ws->sync(who + " (scan and plan)"));

  // Host: totals, the chunk table and each chunk's offset in the payload.
  const auto* host_results = reinterpret_cast<const ChunkScanResult*>(host);
  const auto* host_plans = reinterpret_cast<const hd::ChunkPlan*>(host + plans_at);
  auto* host_offsets = reinterpret_cast<uint64_t*>(host + offsets_at);
  std::vector<uint32_t> sizes(chunks);
  uint64_t payload = 0, checksum_change = 0, base = 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    host_offsets[c] = payload;
    sizes[c] = host_plans[c].total_bytes;
    payload += sizes[c];
    h.changed += host_results[c].changed;
    checksum_change += host_results[c].checksum_change;
    base += host_results[c].base_part;
    ++out.chunks_by_mode[host_plans[c].mode];
  }
  h.base_checksum = want_base ? base : *o.base_checksum;
  h.target_checksum = h.base_checksum + checksum_change;

  uint8_t* payload_dev = nullptr;
  uint8_t* payload_host = nullptr;
  // Whole words: the writers OR bits into the 32-bit words that hold the payload's bytes.
  const size_t payload_words = (payload + 4) / 4;
  ASSIGN_OR_RETURN(payload_dev, ws->buffer(Workspace::kPayload, payload_words * 4, who));
  ASSIGN_OR_RETURN(payload_host, ws->buffer(Workspace::kPayloadHost, payload + 1, who));
  WC_CUDA_TRY(cudaMemsetAsync(payload_dev, 0, payload_words * 4, ws->stream()), who);
  WC_CUDA_TRY(cudaMemcpyAsync(offsets, host_offsets, chunks * sizeof(uint64_t),
                              cudaMemcpyHostToDevice, ws->stream()),
              who);
  chunk_write::write_chunks_kernel<<<chunks, chunk_write::kWriteThreads, 0, ws->stream()>>>(
      pos32, val32, new_b, plans, offsets, h.range_elements, h.chunk_elements,
      static_cast<unsigned>(es), reinterpret_cast<uint32_t*>(payload_dev));
  WC_CUDA_LAUNCHED("write_chunks_kernel", who);
  if (payload > 0) {
    WC_CUDA_TRY(
        cudaMemcpyAsync(payload_host, payload_dev, payload, cudaMemcpyDeviceToHost, ws->stream()),
        who);
  }
  RETURN_IF_ERROR(ws->sync(who + " (write)"));
  out.record = assemble_delta_record(h, sizes, {payload_host, payload});
  return out;
}

}  // namespace weightcast::cuda_codec
