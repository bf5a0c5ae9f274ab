// Driver for a format fuzz target, built once per target with WEIGHTCAST_FUZZ_SEEDS naming
// its seed function and WEIGHTCAST_FUZZ_NAME the target:
//   <target>_smoke [--iterations N]   seeds, then deterministic mutations of them (bit flips,
//                                     byte overwrites, truncations, insertions), without
//                                     libFuzzer (the gcc build of `make test`)
//   <target>_smoke --write-seeds DIR  the seed corpus for a libFuzzer run
// The target aborts on a broken invariant. This driver feeds it and then checks how deep the
// inputs got (tests/fuzz/fuzz_reach.h): every seed must be accepted whole, and the mutated
// inputs must fill each of the target's depths to its minimum. A run whose mutations all stop
// at the first check would pass every invariant while exercising nothing; it fails here,
// naming the target and its counts. The counts are printed on success too.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tests/fuzz/chunk_hd_fuzz_seeds.h"
#include "tests/fuzz/control_message_fuzz_seeds.h"
#include "tests/fuzz/curve_key_fuzz_seeds.h"
#include "tests/fuzz/delta_fuzz_seeds.h"
#include "tests/fuzz/fuzz_reach.h"
#include "tests/fuzz/group_config_fuzz_seeds.h"
#include "tests/fuzz/journal_files_fuzz_seeds.h"
#include "tests/fuzz/nccl_round_fuzz_seeds.h"
#include "tests/fuzz/part_compression_fuzz_seeds.h"
#include "tests/fuzz/safetensors_fuzz_seeds.h"
#include "tests/fuzz/torch_fuzz_seeds.h"
#include "tests/fuzz/ucx_blob_fuzz_seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using weightcast::fuzzing::fuzz_reach_counts;
using weightcast::fuzzing::FuzzDepth;
using weightcast::fuzzing::kMaxFuzzDepths;
using Counts = std::array<uint64_t, kMaxFuzzDepths>;
using ull = unsigned long long;

constexpr const char* kName = WEIGHTCAST_FUZZ_NAME;

uint64_t total(const Counts& c) {
  return std::accumulate(c.begin(), c.end(), uint64_t{0});
}

// Runs one input; false when the target reported no depth for it, or more than one.
bool run_one(const std::vector<uint8_t>& input) {
  const uint64_t before = total(fuzz_reach_counts);
  LLVMFuzzerTestOneInput(input.data(), input.size());
  return total(fuzz_reach_counts) == before + 1;
}

std::vector<uint8_t> mutate(const std::vector<std::vector<uint8_t>>& seeds, std::mt19937_64& rng) {
  std::vector<uint8_t> input = seeds[rng() % seeds.size()];
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !input.empty(); ++e) {
    const size_t at = rng() % input.size();
    switch (rng() % 4) {
      case 0:
        input[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        input[at] = static_cast<uint8_t>(rng());
        break;
      case 2:
        input.resize(at);
        break;
      default:
        input.insert(input.begin() + static_cast<long>(at), static_cast<uint8_t>(rng()));
        break;
    }
  }
  return input;
}

// Failed expectations, printed after the counts so that the log reads in order.
struct Failures {
  std::vector<std::string> lines;

  template <typename... Args>
  void add(const char* format, Args... args) {
    char line[512];
    std::snprintf(line, sizeof(line), format, args...);
    lines.emplace_back(line);
  }
};

// How many of `n` inputs a depth with `min_percent` needs: a share above 0 needs at least one.
uint64_t least_allowed(double min_percent, uint64_t n) {
  if (min_percent <= 0) return 0;
  const double share = std::ceil(min_percent * static_cast<double>(n) / 100);
  return std::max<uint64_t>(1, static_cast<uint64_t>(share));
}

// Prints where the `n` mutated inputs ended (`reached`, per depth) beside each depth's least
// allowed count, and records the depths that hold fewer.
void check_reach(std::span<const FuzzDepth> depths, const Counts& reached, uint64_t n,
                 Failures& failures) {
  const auto percent = [n](uint64_t k) {
    return n == 0 ? 0.0 : 100.0 * static_cast<double>(k) / static_cast<double>(n);
  };
  std::printf("%s: where the %llu mutated inputs ended [least allowed]:\n", kName, ull{n});
  for (size_t d = 0; d < kMaxFuzzDepths; ++d) {
    if (d >= depths.size()) {
      if (reached[d] != 0) {
        failures.add("%llu inputs reported depth %zu, which the target's %zu depths do not name",
                     ull{reached[d]}, d, depths.size());
      }
      continue;
    }
    const double min_percent = depths[d].min_percent;
    const uint64_t least = least_allowed(min_percent, n);
    std::printf("  %zu %-62s %6llu %5.1f%%  [%llu]\n", d, depths[d].name, ull{reached[d]},
                percent(reached[d]), ull{least});
    if (reached[d] < least) {
      failures.add(
          "%llu of %llu mutated inputs (%.2f%%) ended at depth %zu (%s); at least %llu (%g%%) "
          "must",
          ull{reached[d]}, ull{n}, percent(reached[d]), d, depths[d].name, ull{least}, min_percent);
    }
  }
  const uint64_t past_first = total(reached) - reached[0];
  const uint64_t accepted = reached[depths.size() - 1];
  std::printf(
      "%s: %llu of %llu mutated inputs (%.1f%%) got past the first check, %llu (%.1f%%) were "
      "accepted whole\n",
      kName, ull{past_first}, ull{n}, percent(past_first), ull{accepted}, percent(accepted));
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 20000;
  std::string write_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--iterations" && i + 1 < argc) {
      iterations = std::max(0L, std::strtol(argv[++i], nullptr, 10));
    } else if (arg == "--write-seeds" && i + 1 < argc) {
      write_dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--write-seeds DIR]\n", argv[0]);
      return arg == "--help" ? 0 : 2;
    }
  }
  const std::vector<std::vector<uint8_t>> seeds = WEIGHTCAST_FUZZ_SEEDS();
  if (seeds.empty()) {
    std::fprintf(stderr, "%s: no seeds\n", kName);
    return 1;
  }
  if (!write_dir.empty()) {
    for (size_t i = 0; i < seeds.size(); ++i) {
      const std::string path = write_dir + "/seed-" + std::to_string(i);
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr || std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) != seeds[i].size()) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return 1;
      }
      std::fclose(f);
    }
    std::printf("wrote %zu seeds to %s\n", seeds.size(), write_dir.c_str());
    return 0;
  }

  const std::span<const FuzzDepth> depths = weightcast::fuzzing::fuzz_depths();
  if (depths.empty() || depths.size() > kMaxFuzzDepths) {
    std::fprintf(stderr, "%s: FAIL: the target names %zu depths (1 to %zu allowed)\n", kName,
                 depths.size(), kMaxFuzzDepths);
    return 1;
  }
  uint64_t misreported = 0;  // inputs that reported no depth, or several
  for (const auto& s : seeds) misreported += run_one(s) ? 0 : 1;
  const Counts after_seeds = fuzz_reach_counts;
  std::mt19937_64 rng(7);
  for (long it = 0; it < iterations; ++it) misreported += run_one(mutate(seeds, rng)) ? 0 : 1;
  std::printf("%s: %zu seeds and %ld mutated inputs, no invariant broken\n", kName, seeds.size(),
              iterations);

  Failures failures;
  if (misreported != 0) {
    failures.add("%llu inputs reported no depth, or more than one (each must report one)",
                 ull{misreported});
  }
  // Every seed is a valid input: one that ends short of the last depth means that fuzzing
  // starts elsewhere than the seeds claim.
  const uint64_t seeds_accepted = after_seeds[depths.size() - 1];
  std::printf("%s: %llu of %zu seeds accepted whole\n", kName, ull{seeds_accepted}, seeds.size());
  if (seeds_accepted != seeds.size()) {
    failures.add("%llu of %zu seeds were not accepted whole", ull{seeds.size() - seeds_accepted},
                 seeds.size());
  }
  Counts mutated{};
  for (size_t d = 0; d < kMaxFuzzDepths; ++d) mutated[d] = fuzz_reach_counts[d] - after_seeds[d];
  check_reach(depths, mutated, static_cast<uint64_t>(iterations), failures);

  std::fflush(stdout);
  for (const std::string& line : failures.lines) {
    std::fprintf(stderr, "%s: FAIL: %s\n", kName, line.c_str());
  }
  return failures.lines.empty() ? 0 : 1;
}
