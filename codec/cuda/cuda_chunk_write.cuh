// Planning and writing the delta chunks of the CUDA encoder (cuda_delta_encode.cu), one thread
// block per chunk: the bytes hd::plan_chunk and hd::write_chunk (chunk_plan_hd.h) make, found
// in parallel. Include from .cu files only.
//
//  * plan: the sums the plan needs (the values' bit-length histogram, the three Rice quotient
//    sums, the Stream VByte size) reduced over the block; hd::plan_from_sizes then decides, the
//    same function plan_chunk calls.
//  * write: every field of the chunk sits at an offset a block scan gives (a Rice code's bit
//    offset is the sum of the lengths before it; an exception's slot the count of exceptions
//    before it), and its bits are ORed into the payload, which is zeroed first. Neighbouring
//    fields and chunks share 32-bit words, so the ORs are atomic; whole words of a raw chunk,
//    which nothing else touches, are plain stores.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "codec/chunk_plan_hd.h"

namespace weightcast::cuda_codec::chunk_write {
namespace {

constexpr int kWriteThreads = 256;

// ORs the low `bits` (<= 32) bits of `value` into the LSB-first bit stream `words` at `bit`.
__device__ inline void put_bits(uint32_t* words, uint64_t bit, uint32_t value, unsigned bits) {
  if (bits == 0 || value == 0) return;  // the payload is zeroed: zeros need no write
  const uint64_t word = bit >> 5;
  const unsigned shift = static_cast<unsigned>(bit & 31);
  atomicOr(&words[word], value << shift);
  if (shift + bits > 32) atomicOr(&words[word + 1], value >> (32 - shift));
}

using Scan32 = cub::BlockScan<uint32_t, kWriteThreads>;
using Reduce64 = cub::BlockReduce<unsigned long long, kWriteThreads>;

// plans[c] = hd::plan_chunk of chunk c's changes (positions/values at the chunk's start; their
// count in scanned[c].changed).
template <typename Scanned>
__global__ void plan_chunks_kernel(const uint32_t* positions, const uint32_t* values,
                                   const Scanned* scanned, uint64_t range_elements,
                                   uint32_t chunk_elements, unsigned elem_size,
                                   uint32_t allowed_modes, hd::ChunkPlan* plans) {
  __shared__ uint32_t hist[33];
  __shared__ typename Reduce64::TempStorage tmp;
  const uint32_t c = blockIdx.x;
  const uint64_t start = uint64_t{c} * chunk_elements;
  const uint64_t left = range_elements - start;
  const uint32_t length = left < chunk_elements ? static_cast<uint32_t>(left) : chunk_elements;
  const uint32_t n = scanned[c].changed;
  if (n == 0) {
    if (threadIdx.x == 0) plans[c] = hd::plan_from_sizes({}, 0, length, elem_size, allowed_modes);
    return;
  }
  const uint32_t* pos = positions + start;
  const uint32_t* val = values + start;
  for (int b = threadIdx.x; b < 33; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  const unsigned lo = hd::rice_low_k(pos, n);
  unsigned long long q0 = 0, q1 = 0, q2 = 0, svb = 0;
  for (uint32_t k = threadIdx.x; k < n; k += blockDim.x) {
    const uint32_t g = hd::gap_at(pos, k);
    q0 += g >> lo;
    q1 += g >> (lo + 1);
    q2 += g >> (lo + 2);
    svb += hd::streamvbyte_bytes(g);
    atomicAdd(&hist[wc_bit_length(val[k])], 1u);
  }
  unsigned long long sums[4] = {q0, q1, q2, svb};
  for (int i = 0; i < 4; ++i) {
    sums[i] = Reduce64(tmp).Sum(sums[i]);  // valid in thread 0
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  hd::ChunkSizes z;
  hd::choose_values(hist, n, elem_size * 8, &z.value_bits, &z.exceptions, &z.values_bytes);
  const uint64_t q[3] = {sums[0], sums[1], sums[2]};
  hd::choose_rice(q, lo, n, &z.rice_k, &z.rice_bytes);
  z.svb_bytes = (uint64_t{n} + 3) / 4 + sums[3];
  plans[c] = hd::plan_from_sizes(z, n, length, elem_size, allowed_modes);
}

// A raw chunk: the header's words and the new elements' bytes from byte `at` of the payload.
__device__ void write_raw(uint32_t* words, uint64_t at, const uint8_t* src, uint64_t bytes) {
  const uint64_t first_word = (at + 3) / 4, end_word = (at + bytes) / 4;
  for (uint64_t b = at + threadIdx.x; b < first_word * 4 && b < at + bytes; b += blockDim.x)
    put_bits(words, b * 8, src[b - at], 8);  // bytes before the first whole word
  for (uint64_t w = first_word + threadIdx.x; w < end_word; w += blockDim.x) {
    const uint8_t* s = src + (w * 4 - at);
    words[w] =
        uint32_t{s[0]} | (uint32_t{s[1]} << 8) | (uint32_t{s[2]} << 16) | (uint32_t{s[3]} << 24);
  }
  for (uint64_t b = max(end_word, first_word) * 4 + threadIdx.x; b < at + bytes; b += blockDim.x)
    put_bits(words, b * 8, src[b - at], 8);  // bytes after the last whole word
}

// Chunk c at byte offsets[c] of the zeroed payload (viewed as words), as hd::write_chunk.
__global__ void write_chunks_kernel(const uint32_t* positions, const uint32_t* values,
                                    const uint8_t* new_bytes, const hd::ChunkPlan* plans,
                                    const uint64_t* offsets, uint64_t range_elements,
                                    uint32_t chunk_elements, unsigned elem_size, uint32_t* words) {
  __shared__ typename Scan32::TempStorage scan;
  const uint32_t c = blockIdx.x;
  const hd::ChunkPlan plan = plans[c];
  if (plan.changed == 0) return;
  const uint64_t start = uint64_t{c} * chunk_elements;
  const uint64_t left = range_elements - start;
  const uint32_t length = left < chunk_elements ? static_cast<uint32_t>(left) : chunk_elements;
  const uint64_t at = offsets[c];
  if (threadIdx.x == 0) {  // the 12-byte header as three little-endian words
    const uint32_t w0 =
        uint32_t{plan.mode} | (uint32_t{plan.value_bits} << 8) | (uint32_t{plan.rice_k} << 16);
    put_bits(words, at * 8, w0, 32);
    put_bits(words, at * 8 + 32, plan.changed, 32);
    put_bits(words, at * 8 + 64, plan.positions_bytes, 32);
  }
  const uint64_t body = at + kChunkHeaderBytes;
  if (static_cast<ChunkMode>(plan.mode) == ChunkMode::kRaw) {
    write_raw(words, body, new_bytes + start * elem_size, uint64_t{length} * elem_size);
    return;
  }
  const uint32_t n = plan.changed;
  const uint32_t* pos = positions + start;
  const uint32_t* val = values + start;
  const uint64_t p_bit = body * 8;
  const ChunkMode mode = static_cast<ChunkMode>(plan.mode);
  const unsigned k = plan.rice_k;
  const uint32_t control = (n + 3) / 4;
  uint64_t running = 0;  // bits (Rice) or data bytes (Stream VByte) before this tile
  for (uint32_t t0 = 0; t0 < n; t0 += kWriteThreads) {
    const uint32_t i = t0 + threadIdx.x;
    const bool mine = i < n;
    const uint32_t g = mine ? hd::gap_at(pos, i) : 0u;
    if (mode == ChunkMode::kBitmap) {
      if (mine) put_bits(words, p_bit + pos[i], 1u, 1);
      continue;
    }
    uint32_t size = 0;
    if (mine) size = mode == ChunkMode::kGapsRice ? (g >> k) + 1 + k : hd::streamvbyte_bytes(g);
    uint32_t before = 0, tile = 0;
    Scan32(scan).ExclusiveSum(size, before, tile);
    __syncthreads();
    if (mine && mode == ChunkMode::kGapsRice) {
      uint64_t bit = p_bit + running + before;
      uint32_t q = g >> k;
      const uint32_t r = g & bit_mask(k);
      if (q + 1 + k < 32) {  // hd::write_rice_gaps' two cases, the same bits
        put_bits(words, bit, ((1u << q) - 1) | (r << (q + 1)), q + 1 + k);
      } else {
        for (; q >= 32; q -= 32, bit += 32) put_bits(words, bit, 0xFFFFFFFFu, 32);
        put_bits(words, bit, (1u << q) - 1, q);  // q < 32 ones, then the zero
        put_bits(words, bit + q + 1, r, k);
      }
    } else if (mine) {
      put_bits(words, p_bit + 2 * uint64_t{i}, size - 1, 2);
      put_bits(words, p_bit + (control + running + before) * 8, g, 8 * size);
    }
    running += tile;
  }
  // The values: exception count, low bits, exception indices, high bits (hd::write_values).
  const unsigned w = elem_size * 8, bits = plan.value_bits;
  const uint32_t mask = bit_mask(bits);
  const uint64_t v_bit = (body + plan.positions_bytes) * 8;
  if (threadIdx.x == 0) put_bits(words, v_bit, plan.exceptions, 32);
  const uint64_t low_bit = v_bit + 32;
  const uint64_t idx_bit = low_bit + (uint64_t{n} * bits + 7) / 8 * 8;
  const unsigned iw = index_bits(n);
  const uint64_t high_bit = idx_bit + (uint64_t{plan.exceptions} * iw + 7) / 8 * 8;
  uint32_t exceptions_before_tile = 0;
  for (uint32_t t0 = 0; t0 < n; t0 += kWriteThreads) {
    const uint32_t i = t0 + threadIdx.x;
    const uint32_t v = i < n ? val[i] : 0u;
    if (i < n) put_bits(words, low_bit + uint64_t{i} * bits, v & mask, bits);
    if (plan.exceptions == 0) continue;
    const uint32_t wide = i < n && v > mask ? 1u : 0u;
    uint32_t j = 0, tile = 0;
    Scan32(scan).ExclusiveSum(wide, j, tile);
    __syncthreads();
    if (wide) {
      j += exceptions_before_tile;
      put_bits(words, idx_bit + uint64_t{j} * iw, i, iw);
      put_bits(words, high_bit + uint64_t{j} * (w - bits), v >> bits, w - bits);
    }
    exceptions_before_tile += tile;
  }
}

}  // namespace
}  // namespace weightcast::cuda_codec::chunk_write
