// CopyingHasher (copying_hasher.h). The names and constants follow the xxHash specification
// (doc/xxhash_spec.md, "XXH3 algorithm description", long inputs).
#include "transport/ucx/copying_hasher.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_generateSecret_fromSeed
#include <xxhash.h>
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>  // the runtime-dispatched XXH3 (AVX2 where the CPU has it)
#endif

#include <algorithm>
#include <cstring>

#include "transport/ucx/mapped_copy.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace weightcast {
namespace {

constexpr uint64_t kPrime32_1 = 0x9E3779B1U;
constexpr uint64_t kPrime32_2 = 0x85EBCA77U;
constexpr uint64_t kPrime32_3 = 0xC2B2AE3DU;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;

constexpr size_t kStripe = 64;
constexpr size_t kSecretBytes = 192;  // XXH3_SECRET_DEFAULT_SIZE
constexpr size_t kSecretPerStripe = 8;
constexpr size_t kStripesPerBlock = (kSecretBytes - kStripe) / kSecretPerStripe;
constexpr size_t kScrambleKey = kSecretBytes - kStripe;
constexpr size_t kLastStripeKey = kSecretBytes - kStripe - 7;
constexpr size_t kMergeKey = 11;
constexpr size_t kMidsizeMax = 240;  // longer inputs take the long-input algorithm
static_assert(kStripesPerBlock * kStripe == CopyingHasher::kBlockBytes);

#if defined(__x86_64__)  // the fused path; elsewhere copy() copies and digest() calls libxxhash

// XXH3's default secret, as libxxhash gives it (seed 0 leaves the default secret as is).
struct DefaultSecret {
  alignas(64) uint8_t bytes[kSecretBytes];
  DefaultSecret() { XXH3_generateSecret_fromSeed(bytes, 0); }
};
const uint8_t* default_secret() {
  static const DefaultSecret secret;
  return secret.bytes;
}

uint64_t read64(const uint8_t* p) {  // little-endian: the fused path runs on x86-64 only
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void accumulate_stripe(uint64_t acc[8], const uint8_t* in, const uint8_t* key) {
  for (size_t i = 0; i < 8; ++i) {
    const uint64_t data = read64(in + 8 * i);
    const uint64_t data_key = data ^ read64(key + 8 * i);
    acc[i ^ 1] += data;
    acc[i] += (data_key & 0xFFFFFFFFu) * (data_key >> 32);
  }
}

uint64_t mul128_fold64(uint64_t a, uint64_t b) {
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

uint64_t merge_accs(const uint64_t acc[8], const uint8_t* key, uint64_t start) {
  uint64_t h = start;
  for (size_t i = 0; i < 4; ++i) {
    h +=
        mul128_fold64(acc[2 * i] ^ read64(key + 16 * i), acc[2 * i + 1] ^ read64(key + 16 * i + 8));
  }
  h ^= h >> 37;  // avalanche
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}

// One accumulate step for 4 lanes: acc[i^1] += data[i]; acc[i] += lo32(dk[i]) * hi32(dk[i]).
__attribute__((target("avx2"))) inline __m256i accumulate4(__m256i acc, __m256i data,
                                                           const uint8_t* key) {
  const __m256i data_key =
      _mm256_xor_si256(data, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
  const __m256i key_hi = _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1));
  const __m256i product = _mm256_mul_epu32(data_key, key_hi);
  const __m256i swapped = _mm256_shuffle_epi32(data, _MM_SHUFFLE(1, 0, 3, 2));
  return _mm256_add_epi64(product, _mm256_add_epi64(acc, swapped));
}

// acc = (acc ^ (acc >> 47) ^ key) * PRIME32_1, per 64-bit lane.
__attribute__((target("avx2"))) inline __m256i scramble4(__m256i acc, __m256i key) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(kPrime32_1));
  const __m256i mixed = _mm256_xor_si256(_mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47)), key);
  const __m256i mixed_hi = _mm256_shuffle_epi32(mixed, _MM_SHUFFLE(0, 3, 0, 1));
  const __m256i lo = _mm256_mul_epu32(mixed, prime);
  const __m256i hi = _mm256_mul_epu32(mixed_hi, prime);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

// Copies `blocks` whole blocks and folds them into acc, each stripe from the registers it
// was stored from, with the scramble that ends every full block.
//
// kShift16: `to` is 16 bytes past a 32-byte boundary, as malloc's large blocks are (16 past a
// page). Stores that straddle cache lines would cost a fifth of the speed, so each aligned
// 32-byte slot is written from the high half of one source register and the low half of the
// next (vperm2i128), and the first and last 16 bytes from the first and last registers
// alone. Either way every byte stored comes from the register that was hashed.
template <bool kShift16>
__attribute__((target("avx2"))) void copy_blocks_avx2(uint64_t acc[8], uint8_t* to,
                                                      const uint8_t* from, size_t blocks,
                                                      const uint8_t* secret) {
  __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc + 4));
  const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + kScrambleKey));
  const __m256i s1 =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + kScrambleKey + 32));
  __m256i previous = _mm256_setzero_si256();  // kShift16: the last register stored from
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t s = 0; s < kStripesPerBlock; ++s) {
      const auto* in = reinterpret_cast<const __m256i*>(from + s * kStripe);
      uint8_t* out = to + s * kStripe;
      const __m256i d0 = _mm256_loadu_si256(in);
      const __m256i d1 = _mm256_loadu_si256(in + 1);
      if constexpr (kShift16) {
        if (b == 0 && s == 0) {
          _mm_store_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(d0));
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(out - 16),
                             _mm256_permute2x128_si256(previous, d0, 0x21));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 16),
                           _mm256_permute2x128_si256(d0, d1, 0x21));
        previous = d1;
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), d0);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), d1);
      }
      const uint8_t* key = secret + s * kSecretPerStripe;
      a0 = accumulate4(a0, d0, key);
      a1 = accumulate4(a1, d1, key + 32);
    }
    a0 = scramble4(a0, s0);
    a1 = scramble4(a1, s1);
    from += CopyingHasher::kBlockBytes;
    to += CopyingHasher::kBlockBytes;
  }
  if constexpr (kShift16) {
    if (blocks > 0) {
      _mm_store_si128(reinterpret_cast<__m128i*>(to - 16), _mm256_extracti128_si256(previous, 1));
    }
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), a1);
}

// Folds `stripes` stripes at `in` into acc, stripe s with the key at secret + 8 * s (no copy,
// no scramble): the final partial block, read back from the destination.
__attribute__((target("avx2"))) void fold_stripes_avx2(uint64_t acc[8], const uint8_t* in,
                                                       const uint8_t* secret, size_t stripes) {
  __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + 4));
  for (size_t s = 0; s < stripes; ++s) {
    const auto* stripe = reinterpret_cast<const __m256i*>(in + s * kStripe);
    const uint8_t* key = secret + s * kSecretPerStripe;
    a0 = accumulate4(a0, _mm256_loadu_si256(stripe), key);
    a1 = accumulate4(a1, _mm256_loadu_si256(stripe + 1), key + 32);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc), a0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + 4), a1);
}

bool cpu_has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

#endif

}  // namespace

CopyingHasher::CopyingHasher(std::span<uint8_t> dest)
    : dest_(dest), acc_{kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                        kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1} {
#if defined(__x86_64__)
  fused_ = dest.size() > kMidsizeMax && cpu_has_avx2();
#endif
  // XXH3 scrambles after blocks [0, nb_blocks) with nb_blocks = (len - 1) / block.
  if (fused_) scrambled_bytes_ = (dest.size() - 1) / kBlockBytes * kBlockBytes;
}

void CopyingHasher::copy(std::span<const uint8_t> from) {
  const size_t n = std::min(from.size(), dest_.size() - done_);
  uint8_t* to = dest_.data() + done_;
  size_t fused = 0;
  if (fused_ && done_ < scrambled_bytes_) {
    if (done_ % kBlockBytes != 0) {
      fused_ = false;  // an earlier piece broke the contract: digest() hashes dest_ whole
    } else {
#if defined(__x86_64__)
      fused = std::min(n, scrambled_bytes_ - done_) / kBlockBytes * kBlockBytes;
      if (reinterpret_cast<uintptr_t>(to) % 32 == 16) {
        copy_blocks_avx2<true>(acc_, to, from.data(), fused / kBlockBytes, default_secret());
      } else {
        copy_blocks_avx2<false>(acc_, to, from.data(), fused / kBlockBytes, default_secret());
      }
#endif
    }
  }
  // The rest is the final partial block, hashed by digest() from dest_ (or everything when
  // not fused).
  copy_from_mapping(to + fused, from.data() + fused, n - fused);
  done_ += n;
}

uint64_t CopyingHasher::digest() const {
#if defined(__x86_64__)
  if (fused_) {
    alignas(32) uint64_t acc[8];
    std::memcpy(acc, acc_, sizeof acc);
    const uint8_t* secret = default_secret();
    const size_t len = dest_.size();
    const size_t stripes = (len - 1 - scrambled_bytes_) / kStripe;
    fold_stripes_avx2(acc, dest_.data() + scrambled_bytes_, secret, stripes);
    accumulate_stripe(acc, dest_.data() + len - kStripe, secret + kLastStripeKey);
    return merge_accs(acc, secret + kMergeKey, static_cast<uint64_t>(len) * kPrime64_1);
  }
#endif
  return XXH3_64bits(dest_.data(), dest_.size());
}

}  // namespace weightcast
