// Hot loops are compiled twice, for AVX2 and for the x86-64 baseline, and the loader picks
// the best one for the CPU at hand (GNU ifunc through target_clones). A binary built on one
// machine therefore runs at full speed on the GPU hosts and still runs on older CPUs.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(WEIGHTCAST_NO_CLONES)
#define WEIGHTCAST_HOT_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define WEIGHTCAST_HOT_LOOP
#endif
