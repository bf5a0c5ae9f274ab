// The parameters of the kernel suites that run over every element size (1, 2, 4), a set of
// lengths and a set of densities (change_scan_test.cc, change_capture_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace weightcast {

struct KernelCase {
  size_t elem_size;
  uint32_t n;
  double density;
};

inline std::vector<KernelCase> kernel_cases(std::initializer_list<uint32_t> lengths) {
  std::vector<KernelCase> out;
  for (size_t es : {1, 2, 4}) {
    for (uint32_t n : lengths) {
      for (double d : {0.0, 0.01, 0.5, 1.0}) out.push_back({es, n, d});
    }
  }
  return out;
}

// "es2_n1000_d1" for a case's test name.
inline std::string kernel_case_name(const ::testing::TestParamInfo<KernelCase>& info) {
  return "es" + std::to_string(info.param.elem_size) + "_n" + std::to_string(info.param.n) + "_d" +
         std::to_string(static_cast<int>(info.param.density * 100));
}

}  // namespace weightcast
