// The codec on CUDA memory against the CPU codec: checksums equal the published
// vectors and the CPU's over contiguous, unaligned and strided views; the GPU encoder's
// records equal the CPU encoder's byte for byte on random and adversarial inputs; GPU apply
// equals CPU apply into contiguous, strided and sharded destinations; a double-applied,
// shifted, corrupt or wrong-target delta is refused or reverted with memory unchanged.
// Without a usable GPU every test skips and says why.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec/base/byte_io.h"
#include "codec/cuda_codec.h"
#include "tests/codec/cuda_test_util.h"
#include "tests/codec/test_data.h"
#include "weightcast/config.h"

namespace weightcast {
namespace {

using testing::perturb;
using testing::random_bytes;

EncodeOptions options_for(DType dtype, uint32_t chunk, uint32_t modes) {
  return testing::encode_options(dtype, chunk, modes);
}

#if WEIGHTCAST_HAVE_CUDA
using testing::DeviceBuffer;

std::vector<uint8_t> u16s(std::initializer_list<uint16_t> v) {
  std::vector<uint8_t> out;
  for (uint16_t x : v) append_le<uint16_t>(&out, x);
  return out;
}

TEST(CudaCodec, ChecksumsEqualThePublishedVectors) {
  SKIP_WITHOUT_GPU();
  struct Vector {
    std::vector<uint8_t> bytes;
    DType dtype;
    uint64_t first;
    uint64_t expected;
  };
  std::vector<uint8_t> u64;
  append_le<uint64_t>(&u64, 0x0123456789ABCDEFull);
  std::vector<uint8_t> u32;
  append_le<uint32_t>(&u32, 0xDEADBEEFu);
  const Vector vectors[] = {
      {u16s({1, 2, 3}), DType::kI16, 0, 0x000000036345d8baull},
      {u16s({0x7FC1, 0x8000}), DType::kI16, uint64_t{1} << 40, 0x83177c02506a051aull},
      {{0, 255}, DType::kU8, 0, 0x00000000b1a47980ull},
      {u32, DType::kI32, 0, 0x00000000b5aebab3ull},
      {u64, DType::kI64, 0, 0x10774762089887a8ull},
  };
  for (const Vector& v : vectors) {
    const DeviceBuffer dev(v.bytes);
    auto c = checksum_view(dev.view(v.dtype), v.first);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(*c, v.expected) << dtype_name(v.dtype);
  }
}

TEST(CudaCodec, ChecksumsEqualTheCpusOverAlignedUnalignedAndStridedViews) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kU8, DType::kBF16, DType::kF32, DType::kF64}) {
    const size_t es = dtype_size(dtype);
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000003}}) {
      const auto bytes = random_bytes(count * es, count + es);
      for (size_t pad : {size_t{0}, es}) {  // 16-byte aligned, then not
        const DeviceBuffer dev(bytes, pad);
        const uint64_t first = 12345;
        auto gpu = checksum_view(dev.view(dtype), first);
        ASSERT_TRUE(gpu.ok()) << gpu.status().message();
        EXPECT_EQ(*gpu, checksum_range(bytes.data(), es, count, first))
            << dtype_name(dtype) << " count " << count << " pad " << pad;
      }
    }
  }
  // A strided view: columns 3..99 of a [500, 128] bf16 allocation.
  const auto bytes = random_bytes(500 * 128 * 2, 77);
  auto host = bytes;
  TensorRef hv = TensorRef::contiguous("cols", DType::kBF16, host.data(), 500 * 128);
  hv.shape = {500, 97};
  hv.strides = {128, 1};
  hv.offset = 3;
  const DeviceBuffer dev(bytes);
  TensorRef dv = hv;
  dv.data = dev.data();
  dv.memory = MemoryKind::kCuda;
  dv.device = 0;
  auto cpu = checksum_view(hv, 9);
  auto gpu = checksum_view(dv, 9);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  EXPECT_EQ(*gpu, *cpu);
}

// GPU encode == CPU encode, byte for byte; then the record applies on the GPU to the new bytes.
void expect_gpu_matches_cpu(const std::vector<uint8_t>& o, const std::vector<uint8_t>& n,
                            DType dtype, uint32_t chunk, uint32_t modes, bool track_base,
                            const std::string& what) {
  EncodeOptions opt = options_for(dtype, chunk, modes);
  const size_t es = dtype_size(dtype);
  if (track_base) opt.base_checksum = checksum_range(o.data(), es, o.size() / es, opt.range_offset);
  auto cpu = encode_delta(o, n, opt);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  const DeviceBuffer dev_old(o), dev_new(n);
  auto gpu = encode_delta_views(dev_old.view(dtype, "old"), dev_new.view(dtype, "new"), opt);
  ASSERT_TRUE(gpu.ok()) << what << ": " << gpu.status().message();
  ASSERT_EQ(gpu->record.size(), cpu->record.size()) << what;
  EXPECT_TRUE(gpu->record == cpu->record) << what;
  EXPECT_EQ(gpu->chunks_by_mode, cpu->chunks_by_mode) << what;

  auto view = parse_delta_record(gpu->record);
  ASSERT_TRUE(view.ok()) << view.status().message();
  DeviceBuffer dest(o);
  auto applied = apply_delta(*view, dest.view(dtype));
  ASSERT_TRUE(applied.ok()) << what << ": " << applied.status().message();
  EXPECT_EQ(applied->checksum, view->header.target_checksum) << what;
  EXPECT_EQ(applied->changed, view->header.changed) << what;
  EXPECT_TRUE(dest.read() == n) << what;
}

TEST(CudaCodec, EncodeMatchesTheCpuEncoderAndApplyMatchesItOnRandomInputs) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::kU8, DType::kBF16, DType::kF32}) {
    const size_t es = dtype_size(dtype);
    for (double density : {0.0, 0.001, 0.01, 0.3, 0.97}) {
      for (size_t count : {size_t{100}, size_t{200003}, size_t{1} << 21}) {
        if (count > 300000 && density > 0.05) continue;
        const auto o = random_bytes(count * es, 31 + count);
        const auto n = perturb(o, es, density, 37 + count);
        for (uint32_t chunk : {64u, 4097u, kDefaultChunkElements}) {
          const std::string what = std::string(dtype_name(dtype)) + " density " +
                                   std::to_string(density) + " count " + std::to_string(count) +
                                   " chunk " + std::to_string(chunk);
          expect_gpu_matches_cpu(o, n, dtype, chunk, kAllowAllModes, chunk == 4097u, what);
        }
      }
    }
  }
}

TEST(CudaCodec, EncodeMatchesTheCpuEncoderInEveryForcedModeAndOnAdversarialInputs) {
  SKIP_WITHOUT_GPU();
  const size_t count = 300000;
  for (DType dtype : {DType::kU8, DType::kBF16, DType::kF32}) {
    const size_t es = dtype_size(dtype);
    const auto o = random_bytes(count * es, 5 + es);
    std::vector<std::pair<std::string, std::vector<uint8_t>>> cases;
    cases.emplace_back("1%", perturb(o, es, 0.01, 9));
    auto flips = o;  // sign flips at both ends of every chunk and far apart
    for (size_t i : {size_t{0}, size_t{65535}, size_t{65536}, size_t{131071}, count - 1}) {
      flips[i * es + es - 1] ^= 0x80;
    }
    cases.emplace_back("sign flips at chunk edges", flips);
    auto all = o;  // every element changes
    for (auto& b : all) b = static_cast<uint8_t>(b + 1);
    cases.emplace_back("everything", all);
    for (const auto& [name, n] : cases) {
      for (uint32_t modes :
           {uint32_t{kAllowAllModes}, uint32_t{kAllowRice}, uint32_t{kAllowStreamVByte},
            uint32_t{kAllowBitmap}, uint32_t{kAllowRaw}}) {
        expect_gpu_matches_cpu(
            o, n, dtype, kDefaultChunkElements, modes, false,
            name + " " + std::string(dtype_name(dtype)) + " modes " + std::to_string(modes));
      }
    }
  }
}

TEST(CudaCodec, ApplyIntoAStridedSliceAndIntoAShardEqualsTheCpu) {
  SKIP_WITHOUT_GPU();
  // Expert 2 of a packed [4, 300, 64] bf16 parameter, seen as a strided [300, 32] view (every
  // other column).
  const int64_t experts = 4, rows = 300, cols = 64;
  const auto packed = random_bytes(experts * rows * cols * 2, 41);
  auto host_packed = packed;
  TensorRef slice =
      TensorRef::contiguous("expert2", DType::kBF16, host_packed.data(), experts * rows * cols);
  slice.shape = {rows, cols / 2};
  slice.strides = {cols, 2};
  slice.offset = 2 * rows * cols;
  std::vector<uint8_t> old_elems(rows * (cols / 2) * 2);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols / 2; ++c)
      std::memcpy(old_elems.data() + (r * (cols / 2) + c) * 2,
                  packed.data() + (slice.offset + r * cols + c * 2) * 2, 2);
  const auto new_elems = perturb(old_elems, 2, 0.02, 43);
  auto enc = testing::encode(old_elems, new_elems, DType::kBF16, 1024);
  ASSERT_TRUE(enc.ok());
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok());

  ASSERT_TRUE(apply_delta(*rec, slice).ok());  // the CPU reference
  const DeviceBuffer dev(packed);
  TensorRef dslice = slice;
  dslice.data = dev.data();
  dslice.memory = MemoryKind::kCuda;
  dslice.device = 0;
  auto gpu = apply_delta(*rec, dslice);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  EXPECT_TRUE(dev.read() == host_packed);  // the slice changed, everything else did not

  // A shard: elements [2500, 7000) of the same record, with its part checksums.
  const uint64_t a = 2500, b = 7000;
  std::vector<uint8_t> shard_old(old_elems.begin() + a * 2, old_elems.begin() + b * 2);
  std::vector<uint8_t> shard_new(new_elems.begin() + a * 2, new_elems.begin() + b * 2);
  ApplyOptions part;
  part.dest_first_element = a;
  part.part_base_checksum = checksum_range(shard_old.data(), 2, b - a, a);
  part.part_target_checksum = checksum_range(shard_new.data(), 2, b - a, a);
  DeviceBuffer shard(shard_old);
  auto sharded = apply_delta(*rec, shard.view(DType::kBF16, "shard"), part);
  ASSERT_TRUE(sharded.ok()) << sharded.status().message();
  EXPECT_EQ(sharded->checksum, *part.part_target_checksum);
  EXPECT_TRUE(shard.read() == shard_new);
}

constexpr size_t kTargetChecksumOffset = 64;
constexpr size_t kRangeOffsetOffset = 24;

using testing::reseal;

TEST(CudaCodec, DoubleAppliedShiftedCorruptAndWrongTargetDeltasLeaveMemoryUnchanged) {
  SKIP_WITHOUT_GPU();
  const size_t count = 200000;
  const auto o = random_bytes(count * 2, 51);
  const auto n = perturb(o, 2, 0.01, 52);
  for (uint32_t modes : {uint32_t{kAllowAllModes}, uint32_t{kAllowRaw}}) {
    EncodeOptions opt = options_for(DType::kBF16, 4096, modes);
    opt.range_offset = 0;
    opt.tensor_elements = count + 1;
    auto enc = encode_delta(o, n, opt);
    ASSERT_TRUE(enc.ok());
    auto rec = parse_delta_record(enc->record);
    ASSERT_TRUE(rec.ok());

    DeviceBuffer dest(o);
    ASSERT_TRUE(apply_delta(*rec, dest.view(DType::kBF16)).ok());
    auto twice = apply_delta(*rec, dest.view(DType::kBF16));  // double application
    ASSERT_FALSE(twice.ok());
    EXPECT_EQ(twice.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(twice.status().message().find("tensor 'w'"), std::string::npos);
    EXPECT_TRUE(dest.read() == n);

    auto shifted = enc->record;  // the same changes one element later
    store_le<uint64_t>(shifted.data() + kRangeOffsetOffset, 1);
    reseal(&shifted);
    auto srec = parse_delta_record(shifted);
    ASSERT_TRUE(srec.ok()) << srec.status().message();
    DeviceBuffer fresh(o);
    TensorRef fv = fresh.view(DType::kBF16);
    ApplyOptions at1;
    at1.dest_first_element = 1;
    EXPECT_FALSE(apply_delta(*srec, fv, at1).ok());
    EXPECT_TRUE(fresh.read() == o);

    auto wrong = enc->record;  // a target checksum that the changes do not reach
    wrong[kTargetChecksumOffset] ^= 1;
    reseal(&wrong);
    auto wrec = parse_delta_record(wrong);
    ASSERT_TRUE(wrec.ok());
    auto reverted = apply_delta(*wrec, fv);
    ASSERT_FALSE(reverted.ok());
    EXPECT_EQ(reverted.status().code(), StatusCode::kChecksumMismatch);
    EXPECT_TRUE(fresh.read() == o) << "modes " << modes;

    // A corrupt chunk (last byte of the payload) is refused before anything is written.
    auto corrupt = enc->record;
    corrupt[corrupt.size() - kDeltaTrailerBytes - 1] ^= 0xFF;
    reseal(&corrupt);
    auto crec = parse_delta_record(corrupt);
    ASSERT_TRUE(crec.ok());
    auto bad = apply_delta(*crec, fv);
    EXPECT_FALSE(bad.ok());
    EXPECT_TRUE(fresh.read() == o) << "modes " << modes;
  }
}

TEST(CudaCodec, ARecordAlreadyInDeviceMemoryAppliesWithoutTheHostCopy) {
  SKIP_WITHOUT_GPU();
  const auto o = random_bytes(100000 * 4, 61);
  const auto n = perturb(o, 4, 0.02, 62);
  auto enc = testing::encode(o, n, DType::kF32, 2048);
  ASSERT_TRUE(enc.ok());
  auto rec = parse_delta_record(enc->record);
  ASSERT_TRUE(rec.ok());
  const DeviceBuffer dev_record(enc->record);
  DeviceBuffer dest(o);
  auto r = cuda_codec::apply_delta(*rec, dest.view(DType::kF32), {}, dev_record.data());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(dest.read() == n);
}

TEST(CudaCodec, CudaErrorsNameTheTensorAndTheCall) {
  SKIP_WITHOUT_GPU();
  std::vector<uint8_t> bytes(64);
  const DeviceBuffer dev(bytes);
  TensorRef bad = dev.view(DType::kBF16, "on_a_missing_device");
  bad.device = 4096;
  auto c = checksum_view(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("on_a_missing_device"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("cudaSetDevice"), std::string::npos) << c.status().message();
}
#else
TEST(CudaCodec, ChecksumsEqualThePublishedVectors) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}
#endif

TEST(CudaCodecDispatch, HostViewsStillTakeTheCpuPathAndNonContiguousHostEncodeIsRefused) {
  const auto o = random_bytes(4000 * 2, 71);
  const auto n = perturb(o, 2, 0.05, 72);
  auto o_copy = o, n_copy = n;
  EncodeOptions opt = options_for(DType::kBF16, 256, kAllowAllModes);
  auto via_views = encode_delta_views(testing::view_of(o_copy, DType::kBF16),
                                      testing::view_of(n_copy, DType::kBF16), opt);
  auto direct = encode_delta(o, n, opt);
  ASSERT_TRUE(via_views.ok() && direct.ok());
  EXPECT_TRUE(via_views->record == direct->record);
  TensorRef strided = testing::view_of(o_copy, DType::kBF16);
  strided.shape = {2000};
  strided.strides = {2};
  auto refused = encode_delta_views(strided, strided, opt);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not contiguous"), std::string::npos);
}

}  // namespace
}  // namespace weightcast
