// A libFuzzer-free driver for builds without clang's fuzzer runtime (the gcc build of
// `make test`): feeds the seeds and deterministic mutations of them (bit flips, byte
// overwrites, truncations, insertions) to the fuzz target. `--iterations N` (default 20000).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "tests/fuzz/delta_fuzz_seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  long iterations = 20000;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--iterations" && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N]\n", argv[0]);
      return 2;
    }
  }
  const auto seeds = weightcast::fuzzing::make_delta_seeds();
  std::mt19937_64 rng(7);
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
  for (long it = 0; it < iterations; ++it) {
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
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  const auto& c = weightcast::fuzzing::delta_fuzz_counts;
  std::printf(
      "delta fuzz smoke: %zu seeds + %ld mutated inputs: %llu parsed, %llu applied and verified, "
      "%llu refused with memory unchanged\n",
      seeds.size(), iterations, static_cast<unsigned long long>(c.parsed),
      static_cast<unsigned long long>(c.applied), static_cast<unsigned long long>(c.apply_refused));
  // The mutations must reach both outcomes of apply, or this run proved little.
  if (c.applied < seeds.size() || c.apply_refused == 0) {
    std::fprintf(stderr,
                 "delta fuzz smoke: inputs did not reach apply's success and failure paths\n");
    return 1;
  }
  return 0;
}
