// One delta chunk decoded by a whole thread block (cuda_apply_kernels.cuh): the positions and
// values hd::decode_chunk_hd (chunk_decode_hd.h) yields, found in parallel. Include from .cu
// files only.
//
// Contract: block_decode_chunk either leaves exactly decode_chunk_hd's positions and values and
// returns kDecodeOk, or runs decode_chunk_hd itself (thread 0) and returns its code. The
// parallel path accepts a chunk only when every check decode_chunk_hd makes holds; wherever a
// check could fail it hands the chunk to the sequential decoder, so errors keep their exact
// codes and nothing malformed is accepted.
//
//  * Stream VByte: control bytes give each gap's byte count; a block scan gives data offsets,
//    a second scan of gap + 1 gives the positions.
//  * Bitmap: each thread pops the set bits of its bytes; a scan gives their ranks.
//  * Rice: codes have no fixed boundaries. Each thread decodes its slice of the bit stream (about
//    32 codes) from a guessed boundary (its slice's first bit); then, round after round, a thread
//    whose entry differs from where its left neighbour's parse left off decodes again from there.
//    Entry 0 is a true boundary, so after round t slice t is right; parses of a stream of Rice
//    codes fall into step within a few codes, so two or three rounds are the usual count. Scans of
//    the code counts and gap sums then place each slice's codes.
//  * Values: fixed-width low bits, exception indices and high bits, each at a computed offset.
#pragma once

#include <cub/block/block_scan.cuh>

#include "codec/chunk_decode_hd.h"

namespace weightcast::cuda_codec::chunk_decode {
namespace {

constexpr int kDecodeThreads = 256;
constexpr uint32_t kNoBadCode = 0xFFFFFFFFu;
constexpr uint32_t kCodesPerSlice = 32;
constexpr uint32_t kStageWords = 3072;  // Rice sections up to 12 KiB decode from shared memory

// Up to 64 bits of the section at bit `x` (LSB first), `valid` of them real (0 at the end).
struct Window {
  uint64_t bits;
  unsigned valid;
};

__device__ inline Window window_at(const uint8_t* sec, uint64_t size_bytes, uint64_t x) {
  const uint64_t byte = x >> 3;
  const unsigned shift = static_cast<unsigned>(x & 7);
  uint64_t acc = 0;
  unsigned loaded = 0;
  for (unsigned b = 0; b < 8 && byte + b < size_bytes; ++b, loaded += 8) {
    acc |= static_cast<uint64_t>(sec[byte + b]) << (8 * b);
  }
  return {acc >> shift, loaded > shift ? loaded - shift : 0u};
}

// `bits` (<= 32) bits at bit `x`, loading only the bytes that hold them; the caller has
// checked they lie inside the section.
__device__ inline uint32_t bits_at(const uint8_t* sec, uint64_t x, unsigned bits) {
  if (bits == 0) return 0;
  const uint8_t* p = sec + (x >> 3);
  const unsigned shift = static_cast<unsigned>(x & 7), bytes = (shift + bits + 7) / 8;
  uint64_t acc = 0;
  for (unsigned b = 0; b < bytes; ++b) acc |= static_cast<uint64_t>(p[b]) << (8 * b);
  return static_cast<uint32_t>(acc >> shift) & bit_mask(bits);
}

// The Rice section: staged in shared memory as little-endian words (two zero words past its
// end) when it fits there, else read from global memory a byte at a time.
struct RiceSection {
  const uint8_t* bytes;
  const uint32_t* words;  // null when not staged
  uint64_t size;          // bytes

  __device__ Window window(uint64_t x) const {
    if (words == nullptr) return window_at(bytes, size, x);
    const uint64_t total = size * 8;
    if (x >= total) return {0, 0u};
    const uint64_t wi = x >> 5;
    const unsigned shift = static_cast<unsigned>(x & 31);
    uint64_t bits = (words[wi] | (static_cast<uint64_t>(words[wi + 1]) << 32)) >> shift;
    if (shift != 0) bits |= static_cast<uint64_t>(words[wi + 2]) << (64 - shift);
    return {bits, total - x < 64 ? static_cast<unsigned>(total - x) : 64u};
  }
};

// One Rice code at bit `x`: its gap and the bit after it; false where decode_positions would
// fail on it (no terminating zero, a quotient past the chunk, remainder bits missing). One
// window holds the whole code unless its quotient is long.
__device__ inline bool rice_code_at(const RiceSection& sec, uint64_t x, unsigned k, uint32_t length,
                                    uint64_t* gap, uint64_t* next) {
  uint64_t q = 0;
  for (;;) {
    const Window w = sec.window(x);
    if (w.valid == 0) return false;
    const uint64_t inverted = ~w.bits;
    const unsigned ones = inverted == 0 ? 64u : static_cast<unsigned>(__ffsll(inverted) - 1);
    if (ones < w.valid) {
      q += ones;
      x += ones + 1;
      if (q > length || x + k > sec.size * 8) return false;
      const unsigned used = ones + 1;
      const uint64_t r = k == 0                ? 0
                         : used + k <= w.valid ? (w.bits >> used) & bit_mask(k)  // used < 64
                                               : sec.window(x).bits & bit_mask(k);
      *gap = (q << k) | r;
      *next = x + k;
      return true;
    }
    q += w.valid;
    x += w.valid;
    if (q > length) return false;
  }
}

struct RiceSlice {
  uint64_t exit;  // first code boundary at or past the next slice's start
  uint64_t gaps;  // sum of gap + 1 over its codes
  uint32_t codes;
  uint32_t bad;  // index of the code that failed, or kNoBadCode
};

// The codes that start in [entry, slice_end).
__device__ inline RiceSlice rice_slice(const RiceSection& sec, uint64_t entry, uint64_t slice_end,
                                       unsigned k, uint32_t length) {
  RiceSlice s{entry, 0, 0, kNoBadCode};
  uint64_t x = entry;
  while (x < slice_end) {
    uint64_t g = 0, next = 0;
    if (!rice_code_at(sec, x, k, length, &g, &next)) {
      s.bad = s.codes;
      s.exit = ~uint64_t{0};  // nothing after a failed code is a boundary
      return s;
    }
    s.gaps += g + 1;
    ++s.codes;
    x = next;
  }
  s.exit = x;
  return s;
}

using Scan32 = cub::BlockScan<uint32_t, kDecodeThreads>;
using Scan64 = cub::BlockScan<unsigned long long, kDecodeThreads>;

struct Shared {
  union {
    typename Scan32::TempStorage scan32;
    typename Scan64::TempStorage scan64;
  };
  unsigned long long exits[kDecodeThreads];
  uint32_t stage[kStageWords + 2];  // a Rice section of up to kStageWords words, zero-padded
};

// Rice positions; false hands the chunk to the sequential decoder.
__device__ bool rice_positions(Shared& sh, const uint8_t* bytes, uint32_t size, unsigned k,
                               uint32_t count, uint32_t length, uint32_t* positions) {
  RiceSection sec{bytes, nullptr, size};
  const uint32_t words = (size + 3) / 4;
  if (words <= kStageWords) {
    for (uint32_t i = threadIdx.x; i < words + 2; i += blockDim.x) {
      uint32_t v = 0;
      for (uint32_t b = 0; b < 4 && uint64_t{i} * 4 + b < size; ++b)
        v |= uint32_t{bytes[uint64_t{i} * 4 + b]} << (8 * b);
      sh.stage[i] = v;
    }
    __syncthreads();
    sec.words = sh.stage;
  }
  // Slices of about kCodesPerSlice codes: a parse from a guessed boundary falls into step with
  // the true one within a few codes, so most slices are right after the first correction.
  const uint64_t total_bits = uint64_t{size} * 8;
  const uint32_t slices = max(1u, min(uint32_t{kDecodeThreads}, count / kCodesPerSlice));
  const bool active = threadIdx.x < slices;
  const uint64_t slice = (total_bits + slices - 1) / slices;
  const uint64_t start = active ? slice * threadIdx.x : 0, end = active ? start + slice : 0;
  uint64_t entry = start;  // slice 0 starts at the section's first bit: a true boundary
  RiceSlice mine{entry, 0, 0, kNoBadCode};
  bool dirty = active;
  for (int round = 0; round <= kDecodeThreads; ++round) {
    if (dirty) mine = rice_slice(sec, entry, end, k, length);
    sh.exits[threadIdx.x] = mine.exit;
    __syncthreads();
    const uint64_t want = threadIdx.x == 0 ? 0 : sh.exits[threadIdx.x - 1];
    dirty = active && want != entry;
    if (active) entry = want;
    if (!__syncthreads_or(dirty)) break;
  }
  if (__syncthreads_or(dirty)) return false;  // not settled (cannot happen within the bound)
  uint32_t first = 0, total = 0;
  Scan32(sh.scan32).ExclusiveSum(mine.codes, first, total);
  __syncthreads();
  unsigned long long base = 0;
  Scan64(sh.scan64).ExclusiveSum(static_cast<unsigned long long>(mine.gaps), base);
  bool fail = total < count || (mine.bad != kNoBadCode && first + mine.bad < count);
  if (!fail && first < count) {
    const uint32_t mine_count = min(mine.codes, count - first);
    uint64_t x = entry, next_position = base;
    for (uint32_t i = 0; i < mine_count && !fail; ++i) {
      uint64_t g = 0, after = 0;
      fail = !rice_code_at(sec, x, k, length, &g, &after);
      const uint64_t p = next_position + g;
      fail = fail || p >= length;
      if (!fail) positions[first + i] = static_cast<uint32_t>(p);
      next_position = p + 1;
      x = after;
    }
    // The code count ends the section: its last byte holds the last code's last bit.
    if (!fail && first + mine_count == count) fail = (x + 7) / 8 != size;
  }
  return !__syncthreads_or(fail);
}

// Stream VByte positions; false hands the chunk to the sequential decoder.
__device__ bool streamvbyte_positions(Shared& sh, const uint8_t* sec, uint32_t size, uint32_t count,
                                      uint32_t length, uint32_t* positions) {
  const uint32_t control = (count + 3) / 4;
  if (size < control) return false;
  const uint8_t* data = sec + control;
  auto bytes_of = [&](uint32_t i) { return ((sec[i / 4] >> (2 * (i % 4))) & 3u) + 1; };
  // Pass 1: the data's size must match the control bytes before any data byte is read.
  uint64_t data_bytes = 0;
  for (uint32_t t0 = 0; t0 < count; t0 += kDecodeThreads) {
    const uint32_t i = t0 + threadIdx.x;
    uint32_t at = 0, tile = 0;
    Scan32(sh.scan32).ExclusiveSum(i < count ? bytes_of(i) : 0u, at, tile);
    __syncthreads();
    data_bytes += tile;
  }
  if (uint64_t{control} + data_bytes != size) return false;
  // Pass 2: gaps at their offsets, positions from the running sum of gap + 1.
  uint64_t offset = 0, next = 0;
  bool fail = false;
  for (uint32_t t0 = 0; t0 < count; t0 += kDecodeThreads) {
    const uint32_t i = t0 + threadIdx.x;
    const uint32_t n = i < count ? bytes_of(i) : 0u;
    uint32_t at = 0, tile = 0;
    Scan32(sh.scan32).ExclusiveSum(n, at, tile);
    __syncthreads();
    uint32_t g = 0;
    for (uint32_t b = 0; b < n; ++b) g |= uint32_t{data[offset + at + b]} << (8 * b);
    unsigned long long before = 0, tile_sum = 0;
    Scan64(sh.scan64).ExclusiveSum(i < count ? uint64_t{g} + 1 : 0ull, before, tile_sum);
    __syncthreads();
    if (i < count) {
      const uint64_t p = next + before + g;
      fail = fail || p >= length;
      if (p < length) positions[i] = static_cast<uint32_t>(p);
    }
    offset += tile;
    next += tile_sum;
  }
  return !__syncthreads_or(fail);
}

// Bitmap positions; false hands the chunk to the sequential decoder.
__device__ bool bitmap_positions(Shared& sh, const uint8_t* sec, uint32_t size, uint32_t count,
                                 uint32_t length, uint32_t* positions) {
  if (size != hd::bitmap_bytes(length)) return false;
  uint32_t found = 0;
  bool fail = false;
  for (uint32_t t0 = 0; t0 < size; t0 += kDecodeThreads) {
    const uint32_t byte = t0 + threadIdx.x;
    uint32_t b = byte < size ? sec[byte] : 0u;
    uint32_t at = 0, tile = 0;
    Scan32(sh.scan32).ExclusiveSum(static_cast<uint32_t>(__popc(b)), at, tile);
    __syncthreads();
    for (; b != 0; b &= b - 1, ++at) {
      const uint32_t p = byte * 8 + static_cast<uint32_t>(__ffs(b) - 1);
      const uint32_t rank = found + at;
      fail = fail || p >= length || rank >= count;
      if (!fail) positions[rank] = p;
    }
    found += tile;
  }
  fail = fail || found != count;
  return !__syncthreads_or(fail);
}

// The values section (hd::decode_values); false hands the chunk to the sequential decoder.
__device__ bool block_values(const uint8_t* sec, uint64_t size, uint32_t count, unsigned bits,
                             unsigned w, uint32_t* values) {
  hd::ValuesLayout v;
  if (hd::values_layout(sec, size, count, bits, w, &v) != hd::kDecodeOk) return false;
  const uint32_t exceptions = v.exceptions;
  const unsigned iw = v.iw;
  const uint8_t* low = sec + 4;
  const uint8_t* idx = low + v.low_bytes;
  const uint8_t* high = idx + v.idx_bytes;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x)
    values[i] = bits_at(low, uint64_t{i} * bits, bits);
  __syncthreads();
  bool fail = false;
  for (uint32_t e = threadIdx.x; e < exceptions; e += blockDim.x) {
    const uint32_t i = bits_at(idx, uint64_t{e} * iw, iw);
    const uint32_t before = e == 0 ? 0u : bits_at(idx, uint64_t{e - 1} * iw, iw);
    const uint32_t hi = bits_at(high, uint64_t{e} * (w - bits), w - bits);
    fail = fail || i >= count || (e > 0 && i <= before) || hi == 0;
    if (!fail) values[i] |= hi << bits;  // indices are distinct once ascending
  }
  if (__syncthreads_or(fail)) return false;
  const uint32_t limit = max_value(w);
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) fail = fail || values[i] > limit;
  return !__syncthreads_or(fail);
}

// The block's decode of one chunk (see the contract at the top); every thread calls it.
__device__ hd::ChunkDecodeError block_decode_chunk(const uint8_t* bytes, uint64_t size,
                                                   uint32_t length, unsigned elem_size,
                                                   uint32_t* positions, uint32_t* values,
                                                   hd::ChunkHead* head) {
  __shared__ Shared sh;
  // Every thread reads the 12 header bytes itself: the same answer everywhere, no barrier.
  const hd::ChunkDecodeError checked =
      hd::check_chunk_head_hd(bytes, size, length, elem_size, length, head);
  const hd::ChunkHead h = *head;
  if (checked != hd::kDecodeOk || static_cast<ChunkMode>(h.mode) == ChunkMode::kRaw) {
    return checked;
  }
  const uint8_t* sec = bytes + kChunkHeaderBytes;
  bool ok = false;
  switch (static_cast<ChunkMode>(h.mode)) {
    case ChunkMode::kGapsRice:
      ok = h.rice_k <= kMaxRiceK &&
           rice_positions(sh, sec, h.positions_bytes, h.rice_k, h.changed, length, positions);
      break;
    case ChunkMode::kGapsStreamVByte:
      ok = streamvbyte_positions(sh, sec, h.positions_bytes, h.changed, length, positions);
      break;
    default:
      ok = bitmap_positions(sh, sec, h.positions_bytes, h.changed, length, positions);
      break;
  }
  __syncthreads();
  if (ok) {
    const uint64_t rest = size - kChunkHeaderBytes;
    ok = block_values(sec + h.positions_bytes, rest - h.positions_bytes, h.changed, h.value_bits,
                      elem_size * 8, values);
  }
  if (ok) return hd::kDecodeOk;
  // Something would fail (or the parallel path gave up): the sequential decoder says what.
  __shared__ uint8_t sequential;
  if (threadIdx.x == 0) {
    hd::ChunkHead again;
    sequential =
        hd::decode_chunk_hd(bytes, size, length, elem_size, length, positions, values, &again);
  }
  __syncthreads();
  return static_cast<hd::ChunkDecodeError>(sequential);
}

}  // namespace
}  // namespace weightcast::cuda_codec::chunk_decode
