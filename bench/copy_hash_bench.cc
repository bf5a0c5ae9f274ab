// What verifying a part read by loads costs (docs/DECISIONS.md "Copy and hash in one pass"):
// CopyingHasher against its reference, memcpy of the same bytes into the same destination,
// and against the two-pass alternative (copy, then libxxhash's XXH3_64bits), per part size and
// destination alignment. Prints GB/s (1e9 bytes/s) and the ratio to memcpy, best of 5 runs
// of each, interleaved.
//   copy_hash_bench [--quick]   (run by bench/run_ucx_bench.sh)
#include <xxhash.h>
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/ucx/copying_hasher.h"

namespace {

using Clock = std::chrono::steady_clock;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer page_aligned(size_t bytes) {
  void* p = std::aligned_alloc(4096, (bytes + 4096 + 4095) / 4096 * 4096);
  if (p == nullptr) {
    std::fprintf(stderr, "copy_hash_bench: out of memory for %zu bytes\n", bytes);
    std::exit(1);
  }
  std::memset(p, 0, bytes + 4096);  // faulted in before timing
  return Buffer(static_cast<uint8_t*>(p));
}

// GB/s of `iterations` calls of `body`.
double rate(size_t bytes, uint64_t iterations, const std::function<void()>& body) {
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < iterations; ++i) body();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(bytes) * static_cast<double>(iterations) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else {
      std::printf(
          "Usage: copy_hash_bench [--quick]\n"
          "CopyingHasher (copy + XXH3 in one pass) against memcpy of the same bytes and\n"
          "against memcpy then XXH3_64bits; --quick: 1 MiB only, fewer bytes per run.\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  const std::vector<size_t> sizes = quick ? std::vector<size_t>{size_t{1} << 20}
                                          : std::vector<size_t>{size_t{64} << 10, size_t{1} << 20,
                                                                size_t{16} << 20, size_t{64} << 20};
  const double bytes_per_run = quick ? 2e7 : 2e9;
  const int runs = 5;
  std::printf("%-10s %-6s %13s %17s %17s %10s %10s\n", "part", "dest", "memcpy GB/s",
              "copy+XXH3 GB/s", "one pass GB/s", "two-pass", "one-pass");
  for (size_t bytes : sizes) {
    Buffer source = page_aligned(bytes);
    for (size_t i = 0; i < bytes; ++i) source.get()[i] = static_cast<uint8_t>(i * 131 + 7);
    Buffer dest_buffer = page_aligned(bytes);
    const uint64_t iterations =
        std::max<uint64_t>(4, static_cast<uint64_t>(bytes_per_run / static_cast<double>(bytes)));
    for (size_t offset : {size_t{0}, size_t{16}}) {
      uint8_t* dest = dest_buffer.get() + offset;
      volatile uint64_t sink = 0;
      double copy = 0, two_pass = 0, one_pass = 0;
      uint64_t want = 0, got = 0;
      for (int r = 0; r < runs; ++r) {
        copy = std::max(copy, rate(bytes, iterations, [&] {
                          std::memcpy(dest, source.get(), bytes);
                          sink = sink + dest[bytes / 2];
                        }));
        two_pass = std::max(two_pass, rate(bytes, iterations, [&] {
                              std::memcpy(dest, source.get(), bytes);
                              want = XXH3_64bits(dest, bytes);
                            }));
        one_pass = std::max(one_pass, rate(bytes, iterations, [&] {
                              weightcast::CopyingHasher copier({dest, bytes});
                              const size_t piece = size_t{1} << 20;  // the subscriber's chunk
                              for (size_t done = 0; done < bytes; done += piece) {
                                copier.copy({source.get() + done, std::min(piece, bytes - done)});
                              }
                              got = copier.digest();
                            }));
      }
      if (got != want) {
        std::fprintf(stderr, "copy_hash_bench: one-pass digest %016llx != XXH3_64bits %016llx\n",
                     static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
        return 1;
      }
      std::printf("%-10s %-6s %13.2f %17.2f %17.2f %10.2f %10.2f\n",
                  (std::to_string(bytes >> 10) + " KiB").c_str(), (offset == 0 ? "page" : "+16 B"),
                  copy, two_pass, one_pass, two_pass / copy, one_pass / copy);
    }
  }
  return 0;
}
