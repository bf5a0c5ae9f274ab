// The FP8 block quantiser (codec/fp8_quantize.h): e4m3fn encoding of every code and of the
// halfway points between codes, saturation, NaN and infinities, the 1e-4 clamp of an all-zero
// block, ragged edges, strided views of a packed parameter, the refusals, and bit-exactness
// against the NumPy + ml_dtypes reference (tests/codec/fp8_reference.py).
#include "codec/fp8_quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "codec/float_convert.h"

#ifndef WEIGHTCAST_PYTHON
#define WEIGHTCAST_PYTHON ""
#endif
#ifndef WEIGHTCAST_CODEC_TEST_DIR
#define WEIGHTCAST_CODEC_TEST_DIR ""
#endif

namespace weightcast {
namespace {

bool is_nan_code(uint8_t c) {
  return (c & 0x7F) == 0x7F;
}

TEST(Fp8Encoding, EveryCodeDecodesAndEncodesBackToItself) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float f = e4m3fn_to_float(code);
    if (is_nan_code(code)) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(float_to_e4m3fn(f), code) << "a NaN keeps its sign";
      continue;
    }
    EXPECT_EQ(float_to_e4m3fn(f), code) << "code 0x" << std::hex << c << " = " << f;
  }
  EXPECT_EQ(e4m3fn_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3fn_to_float(0x01), 0x1p-9f);  // the smallest subnormal
  EXPECT_EQ(e4m3fn_to_float(0x08), 0x1p-6f);  // the smallest normal
}

TEST(Fp8Encoding, HalfwayPointsRoundToTheEvenCode) {
  for (uint8_t c = 0; c < 0x7E; ++c) {  // consecutive positive codes c, c + 1
    const float lo = e4m3fn_to_float(c), hi = e4m3fn_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few mantissa bits
    const uint8_t even = (c % 2 == 0) ? c : static_cast<uint8_t>(c + 1);
    EXPECT_EQ(float_to_e4m3fn(mid), even) << "between " << lo << " and " << hi;
    EXPECT_EQ(float_to_e4m3fn(-mid), even | 0x80) << "between " << -lo << " and " << -hi;
    EXPECT_EQ(float_to_e4m3fn(std::nextafter(mid, 0.0f)), c) << "below " << mid;
    EXPECT_EQ(float_to_e4m3fn(std::nextafter(mid, 1e9f)), c + 1) << "above " << mid;
  }
}

TEST(Fp8Encoding, SaturatesAndKeepsNans) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_e4m3fn(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3fn(470.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3fn(1e30f), 0x7E);
  EXPECT_EQ(float_to_e4m3fn(-1e30f), 0xFE);
  EXPECT_EQ(float_to_e4m3fn(inf), 0x7E);
  EXPECT_EQ(float_to_e4m3fn(-inf), 0xFE);
  EXPECT_EQ(float_to_e4m3fn(std::nanf("")), 0x7F);
  EXPECT_EQ(float_to_e4m3fn(-std::nanf("")), 0xFF);
  EXPECT_EQ(float_to_e4m3fn(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3fn(0x1p-11f), 0x00);  // a quarter of the smallest subnormal
}

struct Quantised {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

Quantised quantise(const TensorRef& t) {
  Quantised out;
  out.q.resize(static_cast<size_t>(t.shape[0] * t.shape[1]));
  out.scale.resize(static_cast<size_t>(fp8_scale_rows(t.shape[0]) * fp8_scale_cols(t.shape[1])));
  Status s = quantize_fp8_blocks(t, out.q, out.scale);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

TensorRef matrix(const char* name, DType dtype, void* data, int64_t rows, int64_t cols) {
  TensorRef t = TensorRef::contiguous(name, dtype, data, rows * cols);
  t.shape = {rows, cols};
  return t;
}

TEST(Fp8Quantiser, AnAllZeroBlockTakesTheClampedScale) {
  std::vector<float> x(128 * 128, 0.0f);
  const Quantised r = quantise(matrix("zeros", DType::kF32, x.data(), 128, 128));
  ASSERT_EQ(r.scale.size(), 1u);
  EXPECT_EQ(r.scale[0], 1e-4f / 448.0f);
  for (const uint8_t v : r.q) ASSERT_EQ(v, 0);
}

TEST(Fp8Quantiser, TheBlocksLargestMagnitudeIs448AndRaggedEdgesHaveTheirOwnScales) {
  // 130 x 257: a 2 x 3 grid whose last row and column of blocks are 2 rows and 1 column wide.
  const int64_t rows = 130, cols = 257;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& v : x) v = normal(rng);
  x[static_cast<size_t>(129 * cols + 256)] = -3.0f;  // alone in the corner block
  const Quantised r = quantise(matrix("ragged", DType::kF32, x.data(), rows, cols));
  ASSERT_EQ(r.scale.size(), 6u);
  EXPECT_EQ(r.scale[5], 3.0f / 448.0f);
  EXPECT_EQ(r.q[static_cast<size_t>(129 * cols + 256)], 0xFE);  // -448
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float s = r.scale[static_cast<size_t>((i / 128) * 3 + j / 128)];
      const float back = e4m3fn_to_float(r.q[static_cast<size_t>(i * cols + j)]) * s;
      const float v = x[static_cast<size_t>(i * cols + j)];
      // Three mantissa bits: within 1/16 of the value, or of the smallest normal times s.
      ASSERT_LE(std::fabs(back - v), std::max(std::fabs(v) / 16, 0x1p-7f * s)) << i << ", " << j;
    }
  }
}

// Every kernel (the suite runs again with WEIGHTCAST_NO_AVX2, the portable one) against
// the scalar encoder of the fp32 quotient, on 1024 blocks of bf16: each block's amax a random
// bf16 magnitude (so the scales are arbitrary fp32 values, not powers of two), the other values
// every magnitude up to it in turn, both signs. Each value's x / s lands anywhere relative to
// the e4m3fn halfway points, so a kernel whose division is not the correctly rounded one, or
// whose rounding of the quotient is off, differs somewhere.
TEST(Fp8Quantiser, EveryKernelEqualsTheScalarEncoderOfTheQuotient) {
  constexpr int64_t kBlocks = 1024;
  std::vector<uint16_t> x(static_cast<size_t>(kBlocks * 128 * 128));
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> magnitude(0x0080, 0x7F7F);  // normal, finite
  std::vector<uint16_t> amax(kBlocks);
  for (int64_t b = 0; b < kBlocks; ++b) {
    amax[b] = static_cast<uint16_t>(magnitude(rng));
    uint16_t* block = x.data() + b * 128 * 128;  // rows of 128 (a [kBlocks * 128, 128] matrix)
    uint32_t next = static_cast<uint32_t>(rng() % 64);
    for (int64_t i = 0; i < 128 * 128; ++i) {
      const uint32_t m = next++ % (uint32_t{amax[b]} + 1);
      block[i] = static_cast<uint16_t>(m | ((rng() & 1) << 15));
    }
    block[rng() % (128 * 128)] = amax[b];
  }
  TensorRef t =
      TensorRef::contiguous("quotients", DType::kBF16, x.data(), static_cast<int64_t>(x.size()));
  t.shape = {kBlocks * 128, 128};
  const Quantised r = quantise(t);
  ASSERT_EQ(r.scale.size(), static_cast<size_t>(kBlocks));
  for (int64_t b = 0; b < kBlocks; ++b) {
    const float s = std::max(std::bit_cast<float>(uint32_t{amax[b]} << 16), 1e-4f) / 448.0f;
    ASSERT_EQ(r.scale[b], s) << "block " << b;
    for (int64_t i = 0; i < 128 * 128; ++i) {
      const size_t at = static_cast<size_t>(b * 128 * 128 + i);
      const float v = std::bit_cast<float>(uint32_t{x[at]} << 16);
      const float quotient = std::clamp(v / s, -448.0f, 448.0f);
      ASSERT_EQ(r.q[at], float_to_e4m3fn(quotient))
          << "block " << b << " element " << i << ": " << v << " / " << s << " = " << quotient;
    }
  }
}

TEST(Fp8Quantiser, NansStayNansAndInfinitiesSaturateWithoutMovingTheScale) {
  std::vector<float> x(4 * 4, 0.5f);
  x[1] = std::numeric_limits<float>::infinity();
  x[2] = -std::numeric_limits<float>::infinity();
  x[3] = std::nanf("");
  x[4] = 2.0f;
  const Quantised r = quantise(matrix("special", DType::kF32, x.data(), 4, 4));
  EXPECT_EQ(r.scale[0], 2.0f / 448.0f);
  EXPECT_EQ(r.q[1], 0x7E);
  EXPECT_EQ(r.q[2], 0xFE);
  EXPECT_TRUE(is_nan_code(r.q[3]));
  EXPECT_EQ(r.q[4], 0x7E);
  EXPECT_EQ(r.q[0], float_to_e4m3fn(0.5f / (2.0f / 448.0f)));
}

TEST(Fp8Quantiser, AStridedHalfOfAPackedParameterEqualsItsContiguousCopy) {
  const int64_t rows = 200, cols = 96;  // gate_up [200, 192]: the up half is columns 96..191
  std::vector<uint16_t> packed(static_cast<size_t>(rows * 2 * cols)), up;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : packed) v = float_to_bf16(normal(rng));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      up.push_back(packed[static_cast<size_t>(i * 2 * cols + cols + j)]);
  }
  TensorRef half{"gate_up.up", DType::kBF16, {rows, cols}, {2 * cols, 1}, cols, packed.data()};
  const Quantised strided = quantise(half);
  const Quantised contiguous = quantise(matrix("up", DType::kBF16, up.data(), rows, cols));
  EXPECT_EQ(strided.q, contiguous.q);
  EXPECT_EQ(strided.scale, contiguous.scale);
}

TEST(Fp8Quantiser, RefusesWhatItCannotQuantiseNamingTheTensor) {
  std::vector<float> x(8);
  std::vector<uint8_t> q(8);
  std::vector<float> s(1);
  TensorRef cube = TensorRef::contiguous("cube", DType::kF32, x.data(), 8);
  cube.shape = {2, 2, 2};
  Status st = quantize_fp8_blocks(cube, q, s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'cube'"), std::string::npos) << st.to_string();
  TensorRef ints = matrix("ints", DType::kI32, x.data(), 2, 4);
  st = quantize_fp8_blocks(ints, q, s);
  EXPECT_NE(st.message().find("'ints'"), std::string::npos) << st.to_string();
  std::vector<uint8_t> short_q(7);
  st = quantize_fp8_blocks(matrix("m", DType::kF32, x.data(), 2, 4), short_q, s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("8 and 1 needed"), std::string::npos) << st.to_string();
}

// Cases for the reference: random blocks, an all-zero block, +-448 and beyond, halfway
// values, NaN and infinities, ragged edges; as fp32 and as bf16.
TEST(Fp8Quantiser, EqualsTheNumpyAndMlDtypesReferenceBitForBit) {
  const std::string python = WEIGHTCAST_PYTHON;
  if (python.empty() ||
      std::system(("'" + python + "' -c 'import numpy, ml_dtypes' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "'" << python << "' cannot import numpy and ml_dtypes (run: make pyenv)";
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("wc_fp8_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const int64_t rows = 300, cols = 260;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (auto& v : x) v = normal(rng);
  for (int64_t i = 0; i < 128; ++i) {
    for (int64_t j = 128; j < 256; ++j) x[static_cast<size_t>(i * cols + j)] = 0.0f;  // zero block
  }
  x[0] = 448.0f;                   // the first block's amax: its values are x itself
  for (int k = 1; k < 200; ++k) {  // exact halfway points between e4m3 codes, both signs
    const auto c = static_cast<uint8_t>(k % 0x7E);
    const float mid = (e4m3fn_to_float(c) + e4m3fn_to_float(static_cast<uint8_t>(c + 1))) / 2;
    x[static_cast<size_t>(k)] = (k % 2) ? mid : -mid;
  }
  x[static_cast<size_t>(200 * cols + 5)] = 1e6f;  // beyond 448 after scaling
  x[static_cast<size_t>(200 * cols + 6)] = std::nanf("");
  x[static_cast<size_t>(200 * cols + 7)] = -std::numeric_limits<float>::infinity();
  x[static_cast<size_t>(299 * cols + 259)] = -1e-7f;  // the corner block, below the clamp
  std::vector<uint16_t> xb;
  for (const float v : x) xb.push_back(float_to_bf16(v));

  std::string cases = "[";
  const auto write = [&](const std::string& name, const void* data, size_t bytes) {
    const std::string file = (dir / name).string();
    std::ofstream(file, std::ios::binary)
        .write(static_cast<const char*>(data), std::streamsize(bytes));
    return file;
  };
  for (const auto& [label, dtype, data, es] :
       {std::tuple{"f32", DType::kF32, static_cast<void*>(x.data()), 4},
        std::tuple{"bf16", DType::kBF16, static_cast<void*>(xb.data()), 2}}) {
    const Quantised r = quantise(matrix(label, dtype, data, rows, cols));
    cases += std::string(cases.size() > 1 ? "," : "") + "{\"name\": \"" + label +
             "\", \"dtype\": \"" + (dtype == DType::kF32 ? "F32" : "BF16") +
             "\", \"rows\": " + std::to_string(rows) + ", \"cols\": " + std::to_string(cols) +
             ", \"input\": \"" + write(std::string(label) + ".in", data, x.size() * es) +
             "\", \"q\": \"" + write(std::string(label) + ".q", r.q.data(), r.q.size()) +
             "\", \"scale_inv\": \"" +
             write(std::string(label) + ".s", r.scale.data(), r.scale.size() * 4) + "\"}";
  }
  cases += "]";
  const std::string list = write("cases.json", cases.data(), cases.size());
  const std::string log = (dir / "check.log").string();
  const std::string script = std::string(WEIGHTCAST_CODEC_TEST_DIR) + "/fp8_reference.py";
  const int rc = std::system(
      ("'" + python + "' '" + script + "' '" + list + "' > '" + log + "' 2>&1").c_str());
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << output;
  EXPECT_NE(output.find("2 cases: 156000 values and 18 scales equal the reference"),
            std::string::npos)
      << output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weightcast
