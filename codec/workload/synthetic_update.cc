#include "codec/workload/synthetic_update.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/cpu_dispatch.h"
#include "codec/float_convert.h"

// No fused multiply-add contraction, so that a build for an FMA-capable -march gives the same
// bits as the baseline one. Placed after the includes: GCC attaches it to the functions below.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace weightcast {
namespace {

// Normals are produced and consumed in chunks that stay in L1 between the two passes.
constexpr uint64_t kChunk = 4096;
static_assert(kSyntheticBlock % kChunk == 0);

// Domain tags keep the initial weights' stream apart from every step's.
constexpr uint64_t kInitTag = 0x696E6974'77656967ull;
constexpr uint64_t kStepTag = 0x73746570'6E6F6973ull;

// splitmix64's output function for state x (golden-ratio increment, then the finaliser).
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Keys of one block's counter-based stream.
struct BlockKeys {
  uint32_t k[4];
};

BlockKeys block_keys(uint64_t seed, uint64_t tag, uint64_t step_seed, uint64_t block) {
  const uint64_t h = mix64(mix64(mix64(mix64(seed) ^ tag) ^ step_seed) ^ block);
  const uint64_t a = mix64(h);
  const uint64_t b = mix64(h + 1);
  return {{static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32), static_cast<uint32_t>(b),
           static_cast<uint32_t>(b >> 32)}};
}

// Chris Wellons' lowbias32: a 32-bit bijection with good avalanche, built from operations
// AVX2 has for 8 lanes at once (a 64-bit multiply, as splitmix64 needs, it has not).
inline uint32_t lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// ln(x) for x in (0, 1], a normal float: Cephes logf's range reduction and polynomial
// (about 1 ULP), written without branches so that the loop around it vectorises.
inline float log_unit(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t mantissa = bits & 0x007FFFFFu;
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)), so ln(m) stays small. Built from integer
  // operations only: under the default -ftrapping-math GCC will not turn a float compare or
  // select into a vector blend.
  const uint32_t low = mantissa < 0x003504F3u ? 1u : 0u;  // mantissa of sqrt(1/2)
  const int32_t e = static_cast<int32_t>(bits >> 23) - 126 - static_cast<int32_t>(low);
  const float m = std::bit_cast<float>(mantissa | (0x3F000000u + (low << 23)));
  const float f = m - 1.0f;  // in [-0.293, 0.414]
  const float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  const float ef = static_cast<float>(e);
  y += -2.12194440e-4f * ef;
  y += -0.5f * z;
  return f + y + 0.693359375f * ef;
}

// sqrt(x) for x >= 0 from the classic bit-trick estimate of 1/sqrt(x) and three Newton steps
// (a few ULP). std::sqrt would do, but its errno path on negative input keeps
// the loop from vectorising unless the whole file is built with -fno-math-errno.
inline float sqrt_nonneg(float x) {
  float y = std::bit_cast<float>(0x5F3759DFu - (std::bit_cast<uint32_t>(x) >> 1));
  const float half = 0.5f * x;
  y = y * (1.5f - half * y * y);
  y = y * (1.5f - half * y * y);
  y = y * (1.5f - half * y * y);
  return x * y;
}

// Fills out[0, 2 * pairs) with standard normals by Box-Muller: pair p (stream counter
// first_pair + p) gives r cos(theta) to out[p] and r sin(theta) to out[pairs + p].
// theta / 2 lies in [-pi/2, pi/2), where Taylor series of degree 11 and 12 for sin and cos
// are good to about 6e-8; the double-angle formulas then give the full circle.
WEIGHTCAST_HOT_LOOP void fill_normals(const BlockKeys& keys, uint32_t first_pair, uint32_t pairs,
                                      float* __restrict out) {
  const uint32_t k0 = keys.k[0], k1 = keys.k[1], k2 = keys.k[2], k3 = keys.k[3];
  float* __restrict out_sin = out + pairs;
  for (uint32_t p = 0; p < pairs; ++p) {
    const uint32_t j = first_pair + p;
    const uint32_t a = lowbias32(lowbias32(j + k0) ^ k1);
    const uint32_t b = lowbias32(lowbias32(j + k2) ^ k3);
    // u1 in (0, 1] keeps the log finite; t in [-0.5, 0.5) is theta / (2 pi).
    const float u1 = static_cast<float>(static_cast<int32_t>(a >> 8) + 1) * 0x1p-24f;
    const float t = static_cast<float>(static_cast<int32_t>(b >> 8)) * 0x1p-24f - 0.5f;
    // fabs: the log is -0 at u1 = 1.
    const float r = sqrt_nonneg(std::fabs(-2.0f * log_unit(u1)));
    const float h = t * 3.14159265358979f;
    const float h2 = h * h;
    float s = -2.5052108385e-8f;
    s = s * h2 + 2.7557319224e-6f;
    s = s * h2 - 1.9841269841e-4f;
    s = s * h2 + 8.3333333333e-3f;
    s = s * h2 - 1.6666666667e-1f;
    s = (s * h2) * h + h;
    float c = 2.0876756988e-9f;
    c = c * h2 - 2.7557319224e-7f;
    c = c * h2 + 2.4801587302e-5f;
    c = c * h2 - 1.3888888889e-3f;
    c = c * h2 + 4.1666666667e-2f;
    c = c * h2 - 0.5f;
    c = c * h2 + 1.0f;
    out[p] = r * (1.0f - 2.0f * s * s);
    out_sin[p] = r * (2.0f * s * c);
  }
}

inline float clamp3(float z) {
  return std::min(std::max(z, -3.0f), 3.0f);
}

WEIGHTCAST_HOT_LOOP void init_chunk(const float* __restrict z, size_t n, float sigma,
                                    float* __restrict w, uint16_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) {
    const float v = sigma * z[i];
    w[i] = v;
    out[i] = float_to_bf16(v);
  }
}

WEIGHTCAST_HOT_LOOP void step_chunk(const float* __restrict z, size_t n, float lr,
                                    float* __restrict w, uint16_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) {
    const float v = w[i] - lr * clamp3(z[i]);
    w[i] = v;
    out[i] = float_to_bf16(v);
  }
}

// Calls fn(chunk_normals, offset, n) for each chunk of block `block` of a tensor of
// `elements`, in order. The normals depend only on (seed, tag, step_seed, block, offset).
template <typename Fn>
void for_each_chunk(uint64_t seed, uint64_t tag, uint64_t step_seed, uint64_t block,
                    uint64_t elements, Fn&& fn) {
  const BlockKeys keys = block_keys(seed, tag, step_seed, block);
  const uint64_t begin = block * kSyntheticBlock;
  const uint64_t block_n = std::min(kSyntheticBlock, elements - begin);
  alignas(64) float z[kChunk];
  for (uint64_t o = 0; o < block_n; o += kChunk) {
    const uint64_t n = std::min(kChunk, block_n - o);
    const uint32_t pairs = static_cast<uint32_t>((n + 1) / 2);
    fill_normals(keys, static_cast<uint32_t>(o / 2), pairs, z);
    fn(static_cast<const float*>(z), begin + o, static_cast<size_t>(n));
  }
}

void for_each_block(uint64_t elements, ThreadPool* pool, const std::function<void(size_t)>& fn) {
  const uint64_t blocks = (elements + kSyntheticBlock - 1) / kSyntheticBlock;
  if (pool != nullptr && pool->size() > 1) {
    pool->parallel_for(static_cast<size_t>(blocks), fn);
  } else {
    for (uint64_t b = 0; b < blocks; ++b) fn(static_cast<size_t>(b));
  }
}

WEIGHTCAST_HOT_LOOP uint64_t count_changed(const float* __restrict w, const float* __restrict z,
                                           const uint16_t* __restrict before, size_t n, float lr) {
  uint64_t count = 0;
  for (size_t i = 0; i < n; ++i) count += float_to_bf16(w[i] - lr * z[i]) != before[i];
  return count;
}

WEIGHTCAST_HOT_LOOP uint64_t count_different(const uint16_t* __restrict a,
                                             const uint16_t* __restrict b, size_t n) {
  uint64_t count = 0;
  for (size_t i = 0; i < n; ++i) count += a[i] != b[i];
  return count;
}

double sigma_for(int64_t fan_in) {
  return 1.0 / std::sqrt(static_cast<double>(fan_in));
}

}  // namespace

uint16_t SyntheticTensor::to_bf16(float x) {
  return float_to_bf16(x);
}

SyntheticTensor::SyntheticTensor(uint64_t elements, int64_t fan_in, uint64_t seed, ThreadPool* pool)
    : elements_(elements),
      fan_in_(std::max<int64_t>(fan_in, 1)),
      sigma_(sigma_for(fan_in_)),
      seed_(seed),
      master_(std::make_unique_for_overwrite<float[]>(elements)),
      bf16_(std::make_unique_for_overwrite<uint16_t[]>(elements)) {
  const float sigma = static_cast<float>(sigma_);
  float* w = master_.get();
  uint16_t* out = bf16_.get();
  for_each_block(elements_, pool, [&](size_t b) {
    for_each_chunk(seed_, kInitTag, 0, b, elements_, [&](const float* z, uint64_t at, size_t n) {
      init_chunk(z, n, sigma, w + at, out + at);
    });
  });
}

void SyntheticTensor::step(double lr, uint64_t step_seed, ThreadPool* pool) {
  const float lr_f = static_cast<float>(lr);
  float* w = master_.get();
  uint16_t* out = bf16_.get();
  for_each_block(elements_, pool, [&](size_t b) {
    for_each_chunk(
        seed_, kStepTag, step_seed, b, elements_,
        [&](const float* z, uint64_t at, size_t n) { step_chunk(z, n, lr_f, w + at, out + at); });
  });
}

double calibrate_lr(double density, uint64_t seed, int64_t fan_in) {
  density = std::clamp(std::isnan(density) ? 0.0 : density, 1e-9, 0.9);
  const uint64_t n = kCalibrationSample;
  const SyntheticTensor sample(n, fan_in, seed);
  std::vector<float> z(n);
  for (uint64_t b = 0; b < n / kSyntheticBlock; ++b) {
    for_each_chunk(seed, kStepTag, 0, b, n, [&](const float* zc, uint64_t at, size_t m) {
      for (size_t i = 0; i < m; ++i) z[at + i] = clamp3(zc[i]);
    });
  }
  const auto changed_at = [&](double lr) {
    return count_changed(sample.master().data(), z.data(), sample.bf16().data(), n,
                         static_cast<float>(lr));
  };
  // The changed count only grows with lr: a move in one direction never returns to the
  // starting bf16 value. At 1e-10 sigma nothing moves; at 10 sigma all but z ~ 0 do.
  const double target = std::max(1.0, std::ceil(density * static_cast<double>(n)));
  double lo = sample.sigma() * 1e-10;
  double hi = sample.sigma() * 10.0;
  while (hi > lo * (1.0 + 1e-4)) {
    const double mid = std::sqrt(lo * hi);
    if (static_cast<double>(changed_at(mid)) >= target) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

double measured_density(std::span<const uint16_t> a, std::span<const uint16_t> b) {
  if (a.size() != b.size()) return std::nan("");
  if (a.empty()) return 0.0;
  return static_cast<double>(count_different(a.data(), b.data(), a.size())) /
         static_cast<double>(a.size());
}

}  // namespace weightcast
