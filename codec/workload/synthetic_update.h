// A deterministic stand-in for an RL trainer's weights: an fp32 master tensor and the bf16
// copy an engine would receive, advanced by Adam-like steps. Tests and benchmarks use it to
// produce realistic sparse bf16 deltas (most changed elements move by 1 ULP, a few cross
// zero) at a chosen density without a GPU or a real model.
//
// Randomness is counter based: element k of block b (kSyntheticBlock elements) takes its
// normal from a hash of (seed, step_seed, b, k), so the bits of every value depend only on
// those and never on the thread count or schedule. All arithmetic is IEEE fp32 without
// library calls (log, sqrt, sin and cos are fixed polynomials and Newton steps) and without
// FMA contraction, so the bits are also the same across CPUs, the AVX2 and baseline clones,
// optimisation levels, -march and GCC versus Clang (anything short of -ffast-math).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace weightcast {

class ThreadPool;

// Elements per RNG stream and per parallel_for index.
inline constexpr uint64_t kSyntheticBlock = uint64_t{1} << 16;

// Elements in the sample calibrate_lr measures on.
inline constexpr uint64_t kCalibrationSample = uint64_t{1} << 22;

class SyntheticTensor {
 public:
  // Master weights ~ N(0, sigma) with sigma = 1 / sqrt(fan_in) (fan_in < 1 counts as 1), a
  // function of (elements, fan_in, seed) only; the bf16 copy is their round-to-nearest-even.
  // `pool`, when given, spreads the work over its threads; it is not kept.
  SyntheticTensor(uint64_t elements, int64_t fan_in, uint64_t seed, ThreadPool* pool = nullptr);

  SyntheticTensor(SyntheticTensor&&) noexcept = default;
  SyntheticTensor& operator=(SyntheticTensor&&) noexcept = default;
  SyntheticTensor(const SyntheticTensor&) = delete;
  SyntheticTensor& operator=(const SyntheticTensor&) = delete;

  // One optimizer step: w -= lr * clamp(z, -3, 3) with z ~ N(0, 1) drawn from
  // (seed, step_seed, element), in fp32 (lr is rounded to float), then the bf16 copy is
  // refreshed. The result depends on the sequence of (lr, step_seed) applied so far, not on
  // `pool`. Reusing a step_seed repeats the same noise.
  void step(double lr, uint64_t step_seed, ThreadPool* pool = nullptr);

  uint64_t elements() const { return elements_; }
  int64_t fan_in() const { return fan_in_; }
  double sigma() const { return sigma_; }
  uint64_t seed() const { return seed_; }
  std::span<const float> master() const { return {master_.get(), elements_}; }
  // Raw bf16 bits, the tensor an engine holds.
  std::span<const uint16_t> bf16() const { return {bf16_.get(), elements_}; }

  // fp32 -> bf16 raw bits, round to nearest, ties to even. Overflow rounds to infinity;
  // a NaN stays a NaN of the same sign (quiet bit set, top payload bits kept).
  static uint16_t to_bf16(float x);

 private:
  uint64_t elements_ = 0;
  int64_t fan_in_ = 1;
  double sigma_ = 1.0;
  uint64_t seed_ = 0;
  std::unique_ptr<float[]> master_;
  std::unique_ptr<uint16_t[]> bf16_;
};

// The lr at which one step changes `density` of a tensor's bf16 elements (raw bits differ),
// for a tensor with this `fan_in`. Found by bisection in log space on kCalibrationSample
// elements drawn as SyntheticTensor(kCalibrationSample, fan_in, seed) and stepped with
// step_seed 0; the returned lr is the smallest (to about 1e-4 relative) reaching the target
// on that sample. Other seeds and step seeds land within sampling noise: measured on 64Mi
// elements, within about 2% for 0.001 to 0.2. Takes about 0.15 s on one thread.
//
// Density depends on lr and sigma only through lr / sigma, so calibrate_lr(d, seed) (fan_in
// 1, sigma 1) is a relative lr: calibrate_lr(d, seed) * t.sigma() serves any tensor t up
// to sampling noise, which lets one calibration serve a whole model.
//
// `density` must lie in (0, 0.9]; values outside are clamped to that range.
double calibrate_lr(double density, uint64_t seed, int64_t fan_in = 1);

// Fraction of positions whose raw bits differ. NaN when the sizes differ, 0 when both are
// empty.
double measured_density(std::span<const uint16_t> a, std::span<const uint16_t> b);

}  // namespace weightcast
