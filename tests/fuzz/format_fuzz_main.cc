// Driver for a format fuzz target, built once per target with WEIGHTCAST_FUZZ_SEEDS naming
// its seed function:
//   <target>_smoke [--iterations N]   seeds, then deterministic mutations of them (bit flips,
//                                     byte overwrites, truncations, insertions), without
//                                     libFuzzer (the gcc build of `make test`)
//   <target>_smoke --write-seeds DIR  the seed corpus for a libFuzzer run
// The target aborts on a broken invariant; this driver only feeds it (and, when the target
// defines WEIGHTCAST_FUZZ_AFTER, asks it whether the run reached what it should).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/chunk_hd_fuzz_seeds.h"
#include "tests/fuzz/control_message_fuzz_seeds.h"
#include "tests/fuzz/curve_key_fuzz_seeds.h"
#include "tests/fuzz/delta_fuzz_seeds.h"
#include "tests/fuzz/group_config_fuzz_seeds.h"
#include "tests/fuzz/journal_files_fuzz_seeds.h"
#include "tests/fuzz/nccl_round_fuzz_seeds.h"
#include "tests/fuzz/part_compression_fuzz_seeds.h"
#include "tests/fuzz/safetensors_fuzz_seeds.h"
#include "tests/fuzz/torch_fuzz_seeds.h"
#include "tests/fuzz/ucx_blob_fuzz_seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  long iterations = 20000;
  std::string write_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--iterations" && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
    } else if (arg == "--write-seeds" && i + 1 < argc) {
      write_dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--write-seeds DIR]\n", argv[0]);
      return arg == "--help" ? 0 : 2;
    }
  }
  const std::vector<std::vector<uint8_t>> seeds = WEIGHTCAST_FUZZ_SEEDS();
  if (seeds.empty()) {
    std::fprintf(stderr, "%s: no seeds\n", argv[0]);
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
  std::printf("%s: %zu seeds and %ld mutated inputs, no invariant broken\n", argv[0], seeds.size(),
              iterations);
#ifdef WEIGHTCAST_FUZZ_AFTER
  // A target may check that the run reached what it is meant to exercise.
  return WEIGHTCAST_FUZZ_AFTER(seeds.size());
#else
  return 0;
#endif
}
