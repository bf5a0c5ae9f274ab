// The block-parallel chunk decoder of the CUDA apply (codec/cuda/cuda_chunk_decode.cuh) against
// the CPU apply: records of every position mode at several densities, chunk sizes and dtypes
// apply to the same bytes, and records with corrupt chunk bytes (resealed, so only the chunk
// decoder can notice) are accepted or refused exactly as the CPU refuses them, with the
// destination unchanged on refusal. Skipped, saying why, without a usable GPU
// (tests/gpu/run.sh runs it).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "codec/cuda_codec.h"
#include "tests/codec/cuda_test_util.h"
#include "tests/codec/test_data.h"

namespace weightcast {
namespace {

#if WEIGHTCAST_HAVE_CUDA
using testing::DeviceBuffer;
using testing::perturb;
using testing::random_bytes;

using testing::reseal;

EncodeOptions options(DType dtype, uint32_t chunk, uint32_t modes) {
  EncodeOptions o = testing::encode_options(dtype, chunk, modes);
  o.range_offset = 0;  // the destination is the whole tensor
  return o;
}

// Applies `record` to `base` on the CPU and on the GPU: same verdict, same status code, same
// bytes after (the new ones on success, `base` untouched on failure). `cpu_refused`, when
// given, says whether the CPU refused it.
void expect_same_verdict(const std::vector<uint8_t>& record, const std::vector<uint8_t>& base,
                         DType dtype, const std::string& what, bool* cpu_refused = nullptr) {
  auto view = parse_delta_record(record);
  ASSERT_TRUE(view.ok()) << what << ": " << view.status().message();
  std::vector<uint8_t> cpu_dest = base;
  const size_t es = dtype_size(dtype);
  TensorRef cpu_ref =
      TensorRef::contiguous("w", dtype, cpu_dest.data(), static_cast<int64_t>(base.size() / es));
  auto cpu = apply_delta(*view, cpu_ref);
  if (cpu_refused != nullptr) *cpu_refused = !cpu.ok();
  DeviceBuffer dev(base);
  auto gpu = apply_delta(*view, dev.view(dtype));
  ASSERT_EQ(gpu.ok(), cpu.ok()) << what << ": cpu says '"
                                << (cpu.ok() ? "ok" : cpu.status().message()) << "', gpu says '"
                                << (gpu.ok() ? "ok" : gpu.status().message()) << "'";
  if (!cpu.ok()) {
    EXPECT_EQ(gpu.status().code(), cpu.status().code()) << what << ": " << gpu.status().message();
    EXPECT_TRUE(dev.read() == base) << what << ": a refused record changed device memory";
    return;
  }
  EXPECT_EQ(gpu->checksum, cpu->checksum) << what;
  EXPECT_TRUE(dev.read() == cpu_dest) << what;
}

TEST(CudaChunkDecode, EveryPositionModeAtManyDensitiesEqualsTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kU8, DType::kBF16, DType::kF32}) {
    const size_t es = dtype_size(dtype), count = 150001;
    const auto o = random_bytes(count * es, 71 + es);
    for (double density : {0.00002, 0.0005, 0.01, 0.05, 0.2, 0.6}) {
      const auto n = perturb(o, es, density, 73 + static_cast<uint64_t>(density * 1e6));
      for (uint32_t modes : {uint32_t{kAllowRice}, uint32_t{kAllowStreamVByte},
                             uint32_t{kAllowBitmap}, uint32_t{kAllowAllModes}}) {
        for (uint32_t chunk : {64u, 1000u, kDefaultChunkElements}) {
          auto enc = encode_delta(o, n, options(dtype, chunk, modes));
          ASSERT_TRUE(enc.ok()) << enc.status().message();
          expect_same_verdict(enc->record, o, dtype,
                              std::string(dtype_name(dtype)) + " density " +
                                  std::to_string(density) + " modes " + std::to_string(modes) +
                                  " chunk " + std::to_string(chunk));
        }
      }
    }
  }
}

TEST(CudaChunkDecode, CorruptChunkBytesGetTheCpusVerdict) {
  SKIP_WITHOUT_GPU();
  const size_t count = 40000;
  const auto o = random_bytes(count * 2, 81);
  std::mt19937_64 rng(83);
  int refused = 0, trials = 0;
  for (double density : {0.002, 0.03, 0.3}) {
    const auto n = perturb(o, 2, density, 85 + static_cast<uint64_t>(density * 1e4));
    for (uint32_t modes :
         {uint32_t{kAllowRice}, uint32_t{kAllowStreamVByte}, uint32_t{kAllowBitmap}}) {
      auto enc = encode_delta(o, n, options(DType::kBF16, 8192, modes));
      ASSERT_TRUE(enc.ok()) << enc.status().message();
      auto clean = parse_delta_record(enc->record);
      ASSERT_TRUE(clean.ok());
      const size_t payload = clean->payload_offset;
      const size_t body = enc->record.size() - kDeltaTrailerBytes;
      for (int t = 0; t < 40; ++t, ++trials) {
        auto bad = enc->record;
        // One to three bytes of the chunk payloads (headers included) changed at random.
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int f = 0; f < flips; ++f) {
          const size_t at = payload + rng() % (body - payload);
          bad[at] = static_cast<uint8_t>(bad[at] ^ (1u + rng() % 255));
        }
        reseal(&bad);
        if (!parse_delta_record(bad).ok()) continue;  // the chunk table no longer fits
        const std::string what = "density " + std::to_string(density) + " modes " +
                                 std::to_string(modes) + " trial " + std::to_string(t);
        bool cpu_refused = false;
        expect_same_verdict(bad, o, DType::kBF16, what, &cpu_refused);
        if (cpu_refused) ++refused;
      }
    }
  }
  // The corruptions must have exercised the refusal path, not only harmless bits.
  EXPECT_GT(refused, trials / 4) << refused << " of " << trials << " corrupt records refused";
}
#else
TEST(CudaChunkDecode, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without the CUDA toolkit";
}
#endif

}  // namespace
}  // namespace weightcast
