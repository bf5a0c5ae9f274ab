// The CUDA FP8 quantiser (cuda_codec.h quantize_fp8_blocks) against the CPU one
// (codec/fp8_quantize.h, itself checked against NumPy + ml_dtypes): bf16, fp16 and fp32,
// ragged edges, a strided half of a packed parameter, NaN and infinities, all-zero blocks and
// arbitrary scales. Skipped, saying why, without a usable GPU (tests/gpu/run.sh runs it).
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <random>

#include "codec/float_convert.h"
#include "codec/fp8_quantize.h"
#include "tests/codec/cuda_test_util.h"

namespace weightcast {
namespace {

struct Quantised {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

Quantised outputs(int64_t rows, int64_t cols) {
  return {std::vector<uint8_t>(static_cast<size_t>(rows * cols)),
          std::vector<float>(static_cast<size_t>(fp8_scale_rows(rows) * fp8_scale_cols(cols)))};
}

// Random values of `dtype` (magnitudes over many binades; fp16: random bit patterns) for a
// [rows, pitch] matrix, with NaN, infinities and an all-zero block row; the bytes.
std::vector<uint8_t> matrix_bytes(DType dtype, int64_t rows, int64_t pitch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<float> magnitude(-4.0f, 3.0f);
  const size_t es = dtype_size(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(rows * pitch) * es);
  for (int64_t i = 0; i < rows * pitch; ++i) {
    float v = magnitude(rng) * ((rng() & 1) ? -1.0f : 1.0f);
    if (i / pitch >= 128 && i / pitch < 256) v = 0.0f;  // the second block row: all zero
    if (i % 997 == 3) v = std::numeric_limits<float>::quiet_NaN();
    if (i % 1499 == 5) v = -std::numeric_limits<float>::infinity();
    uint8_t* p = out.data() + static_cast<size_t>(i) * es;
    if (dtype == DType::kBF16) {
      const uint16_t b = float_to_bf16(v);
      std::memcpy(p, &b, 2);
    } else if (dtype == DType::kF16) {
      // Random fp16 patterns: every exponent, subnormals, infinities and NaNs among them.
      const auto h = static_cast<uint16_t>(i / pitch >= 128 && i / pitch < 256 ? 0 : rng());
      std::memcpy(p, &h, 2);
    } else {
      std::memcpy(p, &v, 4);
    }
  }
  return out;
}

TEST(CudaFp8Quantiser, EqualsTheCpuQuantiserForEveryDtypeRaggedAndStrided) {
  SKIP_WITHOUT_GPU();
#if WEIGHTCAST_HAVE_CUDA
  const int64_t rows = 300, cols = 257, pitch = 2 * cols + 3;  // a left half of a packed matrix
  for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    std::vector<uint8_t> host = matrix_bytes(dtype, rows, pitch, 7 + static_cast<int>(dtype));
    testing::DeviceBuffer device(host);
    TensorRef cpu{"half", dtype, {rows, cols}, {pitch, 1}, 0, host.data()};
    TensorRef gpu = cpu;
    gpu.data = device.data();
    gpu.memory = MemoryKind::kCuda;
    gpu.device = 0;
    for (const int64_t offset : {int64_t{0}, cols}) {  // both halves
      cpu.offset = gpu.offset = offset;
      Quantised want = outputs(rows, cols), got = outputs(rows, cols);
      ASSERT_TRUE(quantize_fp8_blocks(cpu, want.q, want.scale).ok());
      const Status s = cuda_codec::quantize_fp8_blocks(gpu, got.q, got.scale);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(got.scale, want.scale) << dtype_name(dtype) << " offset " << offset;
      for (size_t i = 0; i < want.q.size(); ++i) {
        ASSERT_EQ(got.q[i], want.q[i])
            << dtype_name(dtype) << " offset " << offset << " element " << i;
      }
    }
  }
#endif
}

TEST(CudaFp8Quantiser, RefusesHostMemoryAndOtherDtypesNamingTheTensor) {
  SKIP_WITHOUT_GPU();
  std::vector<int32_t> ints(16);
  TensorRef t{"counts", DType::kI32, {4, 4}, {}, 0, ints.data()};
  Quantised out = outputs(4, 4);
  Status s = cuda_codec::quantize_fp8_blocks(t, out.q, out.scale);
  EXPECT_NE(s.message().find("'counts'"), std::string::npos) << s.message();
  t.memory = MemoryKind::kCuda;
  s = cuda_codec::quantize_fp8_blocks(t, out.q, out.scale);
  EXPECT_NE(s.message().find("i32"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace weightcast
