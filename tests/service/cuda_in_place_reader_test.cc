// The journal reader writing CUDA destinations in place (transport/fs/catch_up_reader.h) on a
// GPU: the anchor reaches device tensors (a contiguous one and a strided half of a packed
// device allocation, whose other half stays untouched) through bounded host staging, deltas
// are applied on the device, and a delta version whose later tensor fails after the device
// tensors before it were applied leaves every device tensor byte-identical to the previous
// version (revert on the GPU). Skips, with the reason, where no CUDA device is usable.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/codec/cuda_test_util.h"
#include "tests/transport/journal_robustness_util.h"
#include "tests/transport/record_forgery.h"

namespace weightcast {
namespace {

using testing::JournalTestModel;

constexpr uint64_t kSeed = 23;
constexpr uint64_t kHead = 7;

#if WEIGHTCAST_HAVE_CUDA
// Device memory of `bytes` bytes, filled with `fill`.
struct DeviceBytes {
  explicit DeviceBytes(size_t n, uint8_t fill) : size(n) {
    EXPECT_EQ(cudaMalloc(&data, n + 16), cudaSuccess);
    EXPECT_EQ(cudaMemset(data, fill, n), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(data); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(size);
    EXPECT_EQ(cudaMemcpy(out.data(), data, size, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  uint8_t* data = nullptr;
  size_t size;
};

// Tensor 0 ([64, 128] bf16) is the right half of a [64, 256] device allocation, tensor 1
// ([8, 33, 17] bf16) and tensor 4 (u8 [1000]) are whole device tensors; the rest stay on the host.
struct DeviceModel {
  DeviceBytes packed0{64 * 256 * 2, 0xAB};
  DeviceBytes t1{8 * 33 * 17 * 2, 0};
  DeviceBytes t4{1000, 0};
  std::vector<std::vector<uint8_t>> storage;
  std::vector<ReaderDestination> dests;

  DeviceModel() {
    dests = JournalTestModel(kSeed).destinations(&storage);
    dests[0].view = device_view(packed0.data, DType::kBF16, {64, 128});
    dests[0].view.strides = {256, 1};
    dests[0].view.offset = 128;
    dests[1].view = device_view(t1.data, DType::kBF16, {8, 33, 17});
    dests[4].view = device_view(t4.data, DType::kU8, {1000});
  }
  static TensorRef device_view(void* data, DType dtype, std::vector<int64_t> shape) {
    TensorRef r;
    r.dtype = dtype;
    r.shape = std::move(shape);
    r.data = data;
    r.memory = MemoryKind::kCuda;
    r.device = 0;
    return r;
  }
  // Every tensor equals the model at `version`; the packed allocation's left half is untouched.
  void expect_at(uint64_t version) const {
    JournalTestModel want(kSeed);
    want.advance_to(version);
    const auto p = packed0.read();
    for (int64_t r = 0; r < 64; ++r) {
      EXPECT_EQ(std::memcmp(p.data() + r * 512 + 256, want.bytes(0).data() + r * 256, 256), 0)
          << "v" << version << " row " << r;
      for (int64_t c = 0; c < 256; ++c) ASSERT_EQ(p[r * 512 + c], 0xAB) << r << "," << c;
    }
    EXPECT_EQ(t1.read(), want.bytes(1)) << "v" << version;
    EXPECT_EQ(t4.read(), want.bytes(4)) << "v" << version;
    for (const size_t i : {2, 3, 5, 6}) EXPECT_EQ(storage[i], want.bytes(i)) << "v" << version;
  }
};
#endif

class CudaInPlaceReader : public ::testing::Test {
 protected:
  void SetUp() override {
    JournalTestModel model(kSeed);
    auto writer = JournalWriter::open(testing::robustness_options(dir_.path()));
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    ASSERT_TRUE(testing::publish_model_through(writer->get(), &model, kHead).ok());
  }
  testing::ScratchDir dir_;
  JournalLayout layout_{dir_.path()};
};

TEST_F(CudaInPlaceReader, AnchorsAndDeltasReachDeviceTensorsAndStridedHalves) {
  SKIP_WITHOUT_GPU();
#if WEIGHTCAST_HAVE_CUDA
  DeviceModel m;
  CatchUpReader reader(dir_.path(), m.dests);
  for (const uint64_t target : {uint64_t{2}, kHead}) {
    auto report = reader.catch_up(target);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    m.expect_at(target);
  }
#endif
}

TEST_F(CudaInPlaceReader, AFailingTensorRevertsTheDeviceTensorsAppliedBeforeIt) {
  SKIP_WITHOUT_GPU();
#if WEIGHTCAST_HAVE_CUDA
  // Tensor 4 (on the device) fails its target checksum; tensors 0..3 were applied before it.
  ASSERT_TRUE(testing::forge_record(layout_, 5, 4,
                                    [](DeltaRecordHeader* h, std::vector<std::vector<uint8_t>>*) {
                                      h->target_checksum ^= 0x77;
                                    })
                  .ok());
  DeviceModel m;
  CatchUpReader reader(dir_.path(), m.dests);
  ASSERT_TRUE(reader.catch_up(4).ok());
  auto failed = reader.catch_up(5);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kChecksumMismatch) << failed.status().to_string();
  EXPECT_EQ(reader.held(), std::optional<uint64_t>(4));
  m.expect_at(4);
#endif
}

}  // namespace
}  // namespace weightcast
