// Hot loops are compiled twice, for AVX2 and for the x86-64 baseline, and the loader picks
// the best one for the CPU at hand (GNU ifunc through target_clones). A binary built on one
// machine therefore runs at full speed on the GPU hosts and still runs on older CPUs.
#pragma once

#include <cstdlib>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEIGHTCAST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define WEIGHTCAST_ASAN 1
#endif

// Sanitizer builds skip the clones: ifunc resolvers run before the sanitizer runtime is up.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(WEIGHTCAST_ASAN) && !defined(WEIGHTCAST_NO_CLONES)
#define WEIGHTCAST_HOT_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define WEIGHTCAST_HOT_LOOP
#endif

namespace weightcast {

// Whether hand-written AVX2 kernels may run on this CPU (asked once). Setting the environment
// variable WEIGHTCAST_NO_AVX2 forces the portable kernels, so tests cover both.
inline bool cpu_has_avx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has =
      __builtin_cpu_supports("avx2") && std::getenv("WEIGHTCAST_NO_AVX2") == nullptr;
  return has;
#else
  return false;
#endif
}

// Whether AVX-512 (F and BW) kernels may run here (asked once); WEIGHTCAST_NO_AVX512 forces the
// AVX2 ones (and WEIGHTCAST_NO_AVX2 the portable ones), so tests cover every variant.
inline bool cpu_has_avx512bw() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          std::getenv("WEIGHTCAST_NO_AVX512") == nullptr;
  return has;
#else
  return false;
#endif
}

}  // namespace weightcast
