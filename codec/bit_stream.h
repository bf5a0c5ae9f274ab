// Little-endian, least-significant-bit-first bit streams for the delta codec's packed fields,
// one writer and one reader for the CPU codec and the CUDA one (WC_HD: host and device;
// chunk_plan_hd.h and chunk_decode_hd.h are their users).
//
// BitSink writes at a raw pointer; BitReader reads from a bounded span and never reads past
// it: a read beyond the end sets a sticky overrun flag and yields zeros, so decoders check
// overrun() once per section instead of on every value.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "codec/hd.h"

namespace weightcast {

// The low `bits` (0..32) bits set.
WC_HD inline uint32_t bit_mask(unsigned bits) {
  return bits >= 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
}

// Bytes a BitSink may write past the end of its stream on the host: a writer of several
// streams in a row overwrites them with the next stream; the last needs them in the buffer.
inline constexpr size_t kBitSinkSlack = 8;

class BitSink {
 public:
  WC_HD explicit BitSink(uint8_t* p) : p_(p) {}
  // Appends the low `bits` (0..32) bits of `value`; higher bits of `value` must be zero.
  WC_HD void put(uint32_t value, unsigned bits) {
    acc_ |= static_cast<uint64_t>(value) << fill_;
    fill_ += bits;
#if !defined(__CUDA_ARCH__)
    // One unconditional 8-byte store and no branch (kBitSinkSlack bytes after the end).
    std::memcpy(p_, &acc_, 8);
    p_ += fill_ >> 3;
    acc_ >>= fill_ & ~7u;  // fill_ <= 39, so the shift is at most 32
    fill_ &= 7;
#else
    while (fill_ >= 8) {
      *p_++ = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
      fill_ -= 8;
    }
#endif
  }
  // Appends `count` one bits followed by a zero bit (the unary part of a Rice code).
  WC_HD void put_unary(uint64_t count) {
    while (count >= 24) {
      put(0xFFFFFFu, 24);
      count -= 24;
    }
    put(static_cast<uint32_t>((1u << count) - 1), static_cast<unsigned>(count) + 1);
  }
  // Pads the last byte with zero bits; returns the end of what was written.
  WC_HD uint8_t* flush() {
    if (fill_ > 0) *p_++ = static_cast<uint8_t>(acc_);
    acc_ = 0;
    fill_ = 0;
    return p_;
  }

 private:
  uint8_t* p_;
  uint64_t acc_ = 0;
  unsigned fill_ = 0;
};

// The one reader of these streams, for the CPU codec and, through chunk_decode_hd.h, the CUDA
// one (WC_HD: host and device). The accumulator holds at most 63 bits, so every shift by a
// count read from it stays below 64.
class BitReader {
 public:
  WC_HD BitReader(const uint8_t* p, size_t size) : p_(p), size_(size) {}
  explicit BitReader(std::span<const uint8_t> bytes) : BitReader(bytes.data(), bytes.size()) {}

  // Reads `bits` (0..32) bits.
  WC_HD uint32_t get(unsigned bits) {
    if (fill_ < bits) {
      refill();
      if (fill_ < bits) {
        overrun_ = true;
        fill_ = 0;
        acc_ = 0;
        return 0;
      }
    }
    const auto v = static_cast<uint32_t>(acc_ & bit_mask(bits));
    acc_ >>= bits;
    fill_ -= bits;
    return v;
  }
  // Reads one bits up to the next zero bit and returns how many there were; stops counting
  // (and reports overrun) once the count exceeds `limit`.
  WC_HD uint64_t get_unary(uint64_t limit) {
    uint64_t count = 0;
    for (;;) {
      if (fill_ < 32) refill();
      if (fill_ == 0) {
        overrun_ = true;
        return count;
      }
      const uint64_t inverted = ~acc_;
      const uint64_t ones = inverted == 0 ? 64 : wc_ctz64(inverted);
      if (ones < fill_) {
        count += ones;
        acc_ >>= ones + 1;  // ones + 1 <= fill_ <= 63
        fill_ -= static_cast<unsigned>(ones) + 1;
        return count;
      }
      count += fill_;
      acc_ = 0;
      fill_ = 0;
      if (count > limit) {
        overrun_ = true;
        return count;
      }
    }
  }
  WC_HD bool overrun() const { return overrun_; }
  // Whole bytes consumed so far, counting a partly read byte as consumed.
  WC_HD size_t bytes_consumed() const { return pos_ - fill_ / 8; }

 private:
  WC_HD void refill() {
    if (fill_ > 55) return;
#if !defined(__CUDA_ARCH__)
    if (size_ - pos_ >= 8) {  // fast path on the CPU: one 8-byte load tops the buffer up
      uint64_t word;
      std::memcpy(&word, p_ + pos_, 8);
      acc_ |= word << fill_;
      const unsigned take = (63 - fill_) >> 3;
      pos_ += take;
      fill_ += take * 8;
      acc_ &= (uint64_t{1} << fill_) - 1;  // drop the bytes not taken (fill_ <= 63)
      return;
    }
#endif
    // Byte by byte, to at most 63 bits as on the fast path.
    while (fill_ <= 55 && pos_ < size_) {
      acc_ |= static_cast<uint64_t>(p_[pos_++]) << fill_;
      fill_ += 8;
    }
  }
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  unsigned fill_ = 0;
  bool overrun_ = false;
};

}  // namespace weightcast
