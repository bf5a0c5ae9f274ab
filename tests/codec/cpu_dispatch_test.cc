// The kernel switches of codec/cpu_dispatch.h: CTest runs the codec suites three times
// (tests/CMakeLists.txt: as built, WEIGHTCAST_NO_AVX512=1 and WEIGHTCAST_NO_AVX2=1), and those
// runs cover the AVX2 and portable kernels only if the variables really switch them off. Each
// run checks the switch it was started with against what the CPU offers.
#include <gtest/gtest.h>

#include <cstdlib>

#include "codec/cpu_dispatch.h"

namespace weightcast {
namespace {

bool env_set(const char* name) {
  return std::getenv(name) != nullptr;
}

TEST(CpuDispatch, TheEnvironmentSwitchesTheHandWrittenKernels) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool cpu_avx2 = __builtin_cpu_supports("avx2");
  const bool cpu_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  // WEIGHTCAST_NO_AVX2 leaves only the portable kernels; otherwise the CPU decides.
  EXPECT_EQ(cpu_has_avx2(), cpu_avx2 && !env_set("WEIGHTCAST_NO_AVX2"));
  // WEIGHTCAST_NO_AVX512 (or NO_AVX2) leaves no AVX-512 kernel.
  EXPECT_EQ(cpu_has_avx512bw(), cpu_avx2 && cpu_avx512 && !env_set("WEIGHTCAST_NO_AVX2") &&
                                    !env_set("WEIGHTCAST_NO_AVX512"));
  std::printf("this run: AVX2 kernels %s, AVX-512 kernels %s (CPU: AVX2 %s, AVX-512 %s)\n",
              cpu_has_avx2() ? "on" : "off", cpu_has_avx512bw() ? "on" : "off",
              cpu_avx2 ? "yes" : "no", cpu_avx512 ? "yes" : "no");
#else
  GTEST_SKIP() << "not an x86-64 build: only the portable kernels exist";
#endif
}

}  // namespace
}  // namespace weightcast
