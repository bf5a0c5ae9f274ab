// Conversions between the float formats the engines use, bit-exact and header-only so that
// hot loops inline (and vectorise) them.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace weightcast {

// fp32 -> bf16 raw bits, round to nearest, ties to even. Overflow rounds to infinity; a NaN
// stays a NaN of the same sign (quiet bit set, top payload bits kept).
inline uint16_t float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(nan ? (bits >> 16) | 0x0040u : rounded);
}

// IEEE binary16 raw bits -> fp32, exact (every half is a float); NaN payloads keep their bits.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal half: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace weightcast
