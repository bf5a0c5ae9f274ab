// delta_fuzz_seeds DIR: writes the seed corpus for the libFuzzer run.
#include <cstdio>
#include <string>

#include "tests/fuzz/delta_fuzz_seeds.h"

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: %s DIR\nWrites the delta fuzz seed corpus into DIR (which must exist).\n",
                 argv[0]);
    return argc == 2 ? 0 : 2;
  }
  const auto seeds = weightcast::fuzzing::make_delta_seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(i);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) != seeds[i].size()) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    std::fclose(f);
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), argv[1]);
  return 0;
}
