// The FP8 block quantiser (codec/fp8_quantize.h) on one core against a memcpy of the same bf16
// input, timed in the same run, alternating, best of --reps each (docs/PERFORMANCE.md "FP8
// block quantiser"): a 4096 x 4096 bf16 matrix (32 MiB, from memory) and a 1024 x 1024 one
// (2 MiB, in cache). Prints both throughputs and their ratio; the target is >= 0.8.
//   fp8_quantize_bench [--reps N]   (exit 1 on a bad flag or a failed quantisation)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/float_convert.h"
#include "codec/fp8_quantize.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int run(int64_t rows, int64_t cols, int reps, const char* what) {
  std::vector<uint16_t> in(static_cast<size_t>(rows * cols));
  std::mt19937_64 rng(7);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (auto& x : in) x = weightcast::float_to_bf16(d(rng));
  std::vector<uint16_t> copy(in.size());
  std::vector<uint8_t> q(in.size());
  std::vector<float> s(
      static_cast<size_t>(weightcast::fp8_scale_rows(rows) * weightcast::fp8_scale_cols(cols)));
  weightcast::TensorRef ref =
      weightcast::TensorRef::contiguous("bench", weightcast::DType::kBF16, in.data(), rows * cols);
  ref.shape = {rows, cols};
  double best_copy = 1e9, best_quantise = 1e9;
  for (int r = 0; r < reps; ++r) {
    auto t = Clock::now();
    std::memcpy(copy.data(), in.data(), in.size() * 2);
    best_copy = std::min(best_copy, seconds_since(t));
    t = Clock::now();
    if (auto st = weightcast::quantize_fp8_blocks(ref, q, s); !st.ok()) {
      std::fprintf(stderr, "fp8_quantize_bench: %s\n", st.to_string().c_str());
      return 1;
    }
    best_quantise = std::min(best_quantise, seconds_since(t));
  }
  const double bytes = static_cast<double>(in.size()) * 2;
  const double ratio = best_copy / best_quantise;
  std::printf(
      "fp8 quantise %-22s %7.2f GB/s of bf16 input, memcpy %7.2f GB/s, ratio %.2f%s\n", what,
      bytes / best_quantise / 1e9, bytes / best_copy / 1e9, ratio,
      rows == 4096 ? (ratio >= 0.8 ? " (target >= 0.8: pass)" : " (target >= 0.8: FAIL)") : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: fp8_quantize_bench [--reps N]\n");
      return 0;
    } else {
      std::fprintf(stderr, "fp8_quantize_bench: unknown argument '%s' (see --help)\n", argv[i]);
      return 1;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "fp8_quantize_bench: --reps must be at least 1\n");
    return 1;
  }
  if (run(4096, 4096, reps, "4096x4096 (32 MiB)") != 0) return 1;
  return run(1024, 1024, reps * 4, "1024x1024 (2 MiB)");
}
