// Staging tensors that live in CUDA memory (transport/tensor_staging.h): on a GPU, a
// contiguous bf16 tensor and strided views of a packed [E, R, C] parameter (every other
// expert, a column slice, one column, a transposed expert) round-trip through gather
// (device to host: the uploaded bytes) and scatter (host to device: read back, elements
// outside the view untouched); many views gathered at once (coalesced expert slices, shared
// and separate allocations, a host tensor among them) on a pool. Errors name the tensor.
// GPU tests skip, with the reason, where no CUDA device is usable; the CudaStagingHost ones
// (acceptance, buffer sizes, the same views in host memory) run everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/tensor_ref.h"
#include "transport/tensor_staging.h"
#include "weightcast/config.h"

#if WEIGHTCAST_HAVE_CUDA
#include <cuda_runtime.h>

#include "transport/copy_executor_cuda.h"
#endif

namespace weightcast {
namespace {

constexpr int64_t kE = 6, kR = 5, kC = 8, kExpert = kR * kC, kPacked = kE * kExpert;

std::vector<uint16_t> pattern(size_t n, uint16_t seed) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(seed + i * 31 + (i >> 3));
  return v;
}

std::span<const uint8_t> bytes_of(const std::vector<uint16_t>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 2};
}

TensorRef bf16_view(std::string name, void* data, std::vector<int64_t> shape,
                    std::vector<int64_t> strides, int64_t offset, MemoryKind memory) {
  TensorRef ref;
  ref.name = std::move(name);
  ref.dtype = DType::kBF16;
  ref.shape = std::move(shape);
  ref.strides = std::move(strides);
  ref.offset = offset;
  ref.data = data;
  ref.memory = memory;
  ref.device = memory == MemoryKind::kCuda ? 0 : -1;
  return ref;
}

// Element offsets of a rank-2 or rank-3 view from its data pointer, row-major, by plain
// nested loops (independent of the addressing under test).
std::vector<int64_t> offsets_of(const TensorRef& ref) {
  std::vector<int64_t> shape = ref.shape, strides = ref.strides;
  if (shape.size() == 2) {
    shape.insert(shape.begin(), 1);
    strides.insert(strides.begin(), 0);
  }
  std::vector<int64_t> out;
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        out.push_back(ref.offset + a * strides[0] + b * strides[1] + c * strides[2]);
  return out;
}

// Views of a packed [kE, kR, kC] parameter at `data`: strided every way the staging handles.
std::vector<TensorRef> packed_views(void* data, MemoryKind memory) {
  return {
      bf16_view("odd_experts", data, {kE / 2, kR, kC}, {2 * kExpert, kC, 1}, kExpert, memory),
      bf16_view("columns_2_to_5", data, {kE, kR, 3}, {kExpert, kC, 1}, 2, memory),
      bf16_view("column_7", data, {kE, kR}, {kExpert, kC}, 7, memory),
      bf16_view("expert_2_transposed", data, {kC, kR}, {1, kC}, 2 * kExpert, memory),
  };
}

TEST(CudaStagingHost, CudaViewsAcceptedOnlyWithTheToolkit) {
  uint16_t word = 0;
  const TensorRef ref = bf16_view("w.gpu", &word, {1, 1}, {}, 0, MemoryKind::kCuda);
  const Status checked = check_stageable(ref);
#if WEIGHTCAST_HAVE_CUDA
  EXPECT_TRUE(checked.ok()) << checked.to_string();
#else
  EXPECT_EQ(checked.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(checked.message().find("'w.gpu'"), std::string::npos) << checked.message();
  EXPECT_NE(checked.message().find("built without the CUDA toolkit"), std::string::npos)
      << checked.message();
  std::vector<uint8_t> out(2);
  EXPECT_FALSE(gather_tensor(ref, out).ok());  // refused, the pointer never read
#endif
}

TEST(CudaStagingHost, WrongBufferSizeNamesTheTensor) {
  std::vector<uint16_t> packed = pattern(kPacked, 1);
  const TensorRef ref = packed_views(packed.data(), MemoryKind::kHost)[0];
  std::vector<uint8_t> out(ref.numel() * 2 - 2);
  const Status gathered = gather_tensor(ref, out);
  EXPECT_EQ(gathered.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gathered.message().find("'odd_experts'"), std::string::npos) << gathered.message();
  const Status scattered = scatter_tensor(out, ref);
  EXPECT_EQ(scattered.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(packed, pattern(kPacked, 1));  // nothing written
}

// The same views in host memory: the model the CUDA tests hold the device path to.
TEST(CudaStagingHost, HostViewsRoundTrip) {
  const std::vector<uint16_t> packed = pattern(kPacked, 3);
  for (size_t v = 0; v < 4; ++v) {
    std::vector<uint16_t> buffer = packed;
    const TensorRef ref = packed_views(buffer.data(), MemoryKind::kHost)[v];
    SCOPED_TRACE(ref.name);
    const std::vector<int64_t> offsets = offsets_of(ref);
    std::vector<uint16_t> gathered(offsets.size()), expected(offsets.size());
    for (size_t k = 0; k < offsets.size(); ++k) expected[k] = packed[offsets[k]];
    ASSERT_TRUE(
        gather_tensor(ref, {reinterpret_cast<uint8_t*>(gathered.data()), gathered.size() * 2})
            .ok());
    EXPECT_EQ(gathered, expected);
    const std::vector<uint16_t> written = pattern(offsets.size(), 5000);
    std::vector<uint16_t> after = packed;
    for (size_t k = 0; k < offsets.size(); ++k) after[offsets[k]] = written[k];
    ASSERT_TRUE(scatter_tensor(bytes_of(written), ref).ok());
    EXPECT_EQ(buffer, after);
  }
}

#if WEIGHTCAST_HAVE_CUDA

// cudaMalloc'd bytes, freed at scope end.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  void upload(const std::vector<uint16_t>& v) {
    ASSERT_EQ(v.size() * 2, bytes);
    ASSERT_EQ(cudaMemcpy(p, v.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<uint16_t> download() const {
    std::vector<uint16_t> v(bytes / 2);
    EXPECT_EQ(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

#define SKIP_WITHOUT_GPU()                                                           \
  do {                                                                               \
    std::string why;                                                                 \
    if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device: " << why; \
  } while (0)

TEST(CudaStaging, ContiguousBf16RoundTrip) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 37, kCols = 111;
  DeviceBuffer buffer(kRows * kCols * 2);
  const std::vector<uint16_t> uploaded = pattern(kRows * kCols, 7);
  buffer.upload(uploaded);
  const TensorRef ref = bf16_view("w.bf16", buffer.p, {kRows, kCols}, {}, 0, MemoryKind::kCuda);
  std::vector<uint16_t> gathered(kRows * kCols);
  ASSERT_TRUE(
      gather_tensor(ref, {reinterpret_cast<uint8_t*>(gathered.data()), gathered.size() * 2}).ok());
  EXPECT_EQ(gathered, uploaded);

  const std::vector<uint16_t> written = pattern(kRows * kCols, 901);
  const Status scattered = scatter_tensor(bytes_of(written), ref);
  ASSERT_TRUE(scattered.ok()) << scattered.to_string();
  EXPECT_EQ(buffer.download(), written);
}

TEST(CudaStaging, StridedViewsOfAPackedParameterRoundTrip) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer buffer(kPacked * 2);
  const std::vector<uint16_t> packed = pattern(kPacked, 3);
  for (const TensorRef& ref : packed_views(buffer.p, MemoryKind::kCuda)) {
    SCOPED_TRACE(ref.name);
    buffer.upload(packed);
    const std::vector<int64_t> offsets = offsets_of(ref);
    ASSERT_EQ(offsets.size(), ref.numel());
    std::vector<uint16_t> gathered(offsets.size()), expected(offsets.size());
    for (size_t k = 0; k < offsets.size(); ++k) expected[k] = packed[offsets[k]];
    const Status g =
        gather_tensor(ref, {reinterpret_cast<uint8_t*>(gathered.data()), gathered.size() * 2});
    ASSERT_TRUE(g.ok()) << g.to_string();
    EXPECT_EQ(gathered, expected);

    const std::vector<uint16_t> written = pattern(offsets.size(), 5000);
    std::vector<uint16_t> after = packed;  // the view's elements replaced, nothing else
    for (size_t k = 0; k < offsets.size(); ++k) after[offsets[k]] = written[k];
    const Status s = scatter_tensor(bytes_of(written), ref);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(buffer.download(), after);
  }
}

TEST(CudaStaging, ManyViewsGatheredTogether) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer experts(kPacked * 2), other(kPacked * 2);
  const std::vector<uint16_t> a = pattern(kPacked, 11), b = pattern(kPacked, 12);
  experts.upload(a);
  other.upload(b);
  std::vector<uint16_t> host = pattern(kPacked, 13);
  std::vector<TensorRef> refs;
  std::vector<std::vector<int64_t>> offsets;
  std::vector<const std::vector<uint16_t>*> source;
  // Every expert of `experts` in order: one coalesced transfer.
  for (int64_t e = 0; e < kE; ++e) {
    refs.push_back(bf16_view("experts." + std::to_string(e), experts.p, {kR, kC}, {kC, 1},
                             e * kExpert, MemoryKind::kCuda));
    source.push_back(&a);
  }
  for (const TensorRef& v : packed_views(other.p, MemoryKind::kCuda)) {
    refs.push_back(v);
    source.push_back(&b);
  }
  for (const TensorRef& v : packed_views(host.data(), MemoryKind::kHost)) {
    refs.push_back(v);
    source.push_back(&host);
  }
  std::vector<std::vector<uint16_t>> outs;
  std::vector<std::span<uint8_t>> spans;
  for (const TensorRef& r : refs) outs.emplace_back(r.numel(), 0xdead);
  for (auto& o : outs) spans.push_back({reinterpret_cast<uint8_t*>(o.data()), o.size() * 2});
  ThreadPool pool(4);
  const uint64_t pinned_before = cuda_pinned_staging_bytes();
  const Status g = gather_tensors(refs, spans, &pool);
  ASSERT_TRUE(g.ok()) << g.to_string();
  for (size_t i = 0; i < refs.size(); ++i) {
    const std::vector<int64_t> off = offsets_of(refs[i]);
    std::vector<uint16_t> expected(off.size());
    for (size_t k = 0; k < off.size(); ++k) expected[k] = (*source[i])[off[k]];
    EXPECT_EQ(outs[i], expected) << refs[i].name;
  }
  EXPECT_EQ(cuda_pinned_staging_bytes(), pinned_before);  // the executor's staging released
}

TEST(CudaStaging, ErrorsNameTheTensor) {
  // A bad ordinal fails with or without a GPU (then: no device at all).
  std::vector<uint16_t> host = pattern(16, 1);
  TensorRef bad = bf16_view("bad.ordinal", host.data(), {16}, {}, 0, MemoryKind::kCuda);
  bad.device = 99;
  std::vector<uint8_t> out(32);
  const Status g = gather_tensor(bad, out);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("'bad.ordinal'"), std::string::npos) << g.message();
  const Status s = scatter_tensor(bytes_of(host), bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'bad.ordinal'"), std::string::npos) << s.message();
  std::string why;
  if (!cuda_device_usable(&why)) GTEST_SKIP() << "no usable CUDA device for the rest: " << why;
  EXPECT_EQ(g.code(), StatusCode::kInvalidArgument) << g.to_string();
  EXPECT_NE(g.message().find("cudaSetDevice(99)"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("invalid device ordinal"), std::string::npos) << g.message();

  // Host memory labelled as device memory: refused, not copied through unified addressing.
  TensorRef lying = bf16_view("host.labelled.cuda", host.data(), {16}, {}, 0, MemoryKind::kCuda);
  const Status l = gather_tensor(lying, out);
  EXPECT_EQ(l.code(), StatusCode::kInvalidArgument) << l.to_string();
  EXPECT_NE(l.message().find("'host.labelled.cuda'"), std::string::npos) << l.message();
  EXPECT_NE(l.message().find("not device memory"), std::string::npos) << l.message();
  EXPECT_FALSE(scatter_tensor(bytes_of(host), lying).ok());
  EXPECT_EQ(host, pattern(16, 1));
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 0);  // the failed calls restored the current device
}

#else

TEST(CudaStaging, ContiguousBf16RoundTrip) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}
TEST(CudaStaging, StridedViewsOfAPackedParameterRoundTrip) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}
TEST(CudaStaging, ManyViewsGatheredTogether) {
  GTEST_SKIP() << "built without the CUDA toolkit (WEIGHTCAST_HAVE_CUDA=0)";
}

#endif

}  // namespace
}  // namespace weightcast
