// The CUDA codec's figures against a device-to-device copy measured in the same run:
//
//   gpu_codec_bench [--elements N] [--density D] [--repetitions R] [--help]
//
// Makes N bf16 elements of "old" weights and an Adam-like update of about D of them on the GPU
// (default 256 Mi at 1 %), then times (median of R, host clock around each call, which returns
// only when the work is done):
//   copy      cudaMemcpy of the tensor, device to device (counted: bytes read + written)
//   checksum  checksum_view of the tensor (bytes read)
//   encode    encode_delta_views(old, new) with the base checksum tracked, record returned to
//             the host and framed (bytes of old + new read); also without a tracked base
//   apply     apply_delta of that record from host memory, base checksum computed on the GPU
//             (tensor read + record read + changed elements written); also with the record
//             already in device memory and the current checksum tracked
//   host      the encoder's host share: the record's payload device to host (pinned) and
//             assemble_delta_record framing it (copy, chunk table, XXH3 trailer)
//   fp8       cuda_codec::quantize_fp8_blocks of the new tensor as a [N/8192, 8192] matrix
//             (bf16 in, block-FP8 values and scales out to host memory: 2 + 1 bytes an element
//             counted), next to a device-to-host copy of the values' N bytes (its floor: the
//             values land in host memory); checked byte-equal to the CPU quantiser on the
//             first 256 rows
// and prints one JSON object: each figure's GB/s and its ratio to the copy's GB/s, plus checks
// (the GPU record equals the CPU encoder's on the first 4 Mi elements; the applied tensor
// equals the new one). Exit status 1 when a check fails.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/cuda_codec.h"
#include "codec/delta_apply.h"
#include "codec/delta_encoder.h"
#include "codec/fp8_quantize.h"

namespace {

using weightcast::DType;
using weightcast::MemoryKind;
using weightcast::TensorRef;

__device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Old weights: bf16 of magnitude ~N(0, 0.02)-like bit patterns; new: about `density` of them
// moved by 1-2 ULP, one in 64 of those across zero (a sign flip).
__global__ void make_weights(uint16_t* old_w, uint16_t* new_w, uint64_t n, uint32_t threshold) {
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t r = mix(i * 2 + 1);
    const uint16_t o = static_cast<uint16_t>(0x3C00 + (r & 0x03FF)) | ((r >> 16) & 0x8000);
    old_w[i] = o;
    const uint32_t pick = mix(i * 2 + 2);
    uint16_t v = o;
    if (pick < threshold)
      v = (pick & 63) == 0 ? static_cast<uint16_t>(o ^ 0x8000)
                           : static_cast<uint16_t>(o + 1 + (pick & 1));
    new_w[i] = v;
  }
}

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

double median_seconds(int reps, const std::function<bool()>& setup,
                      const std::function<bool()>& run) {
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up
    if (!setup()) return -1;
    const auto a = std::chrono::steady_clock::now();
    if (!run()) return -1;
    const auto b = std::chrono::steady_clock::now();
    if (r > 0) t.push_back(std::chrono::duration<double>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

TensorRef device_view(const char* name, void* p, uint64_t n) {
  TensorRef r = TensorRef::contiguous(name, DType::kBF16, p, static_cast<int64_t>(n));
  r.memory = MemoryKind::kCuda;
  r.device = 0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t n = uint64_t{256} << 20;
  double density = 0.01;
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::puts(
          "usage: gpu_codec_bench [--elements N] [--density D] [--repetitions R]\n"
          "Times the CUDA codec (checksum, encode, apply, the encoder's host share) and the\n"
          "CUDA FP8 quantiser against a device-to-device copy of the same bytes measured in\n"
          "the same run; prints JSON (see the source). Defaults: 268435456 bf16 elements,\n"
          "density 0.01, 10 repetitions.");
      return 0;
    }
    if (a != "--elements" && a != "--density" && a != "--repetitions") {
      std::fprintf(stderr, "gpu_codec_bench: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpu_codec_bench: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    if (a == "--elements")
      n = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--density")
      density = std::atof(argv[++i]);
    else if (a == "--repetitions")
      reps = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "gpu_codec_bench: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  std::string why;
  if (!weightcast::cuda_codec::device_usable(&why)) {
    std::fprintf(stderr, "gpu_codec_bench: no usable CUDA device: %s\n", why.c_str());
    return 1;
  }
  const uint64_t bytes = n * 2;
  uint16_t *old_w = nullptr, *new_w = nullptr, *dest = nullptr;
  uint8_t* dev_record = nullptr;
  if (!check(cudaMalloc(&old_w, bytes), "cudaMalloc old") ||
      !check(cudaMalloc(&new_w, bytes), "cudaMalloc new") ||
      !check(cudaMalloc(&dest, bytes), "cudaMalloc dest"))
    return 1;
  const double scaled = std::min(std::max(density, 0.0), 1.0) * 4294967295.0;
  make_weights<<<1024, 256>>>(old_w, new_w, n, static_cast<uint32_t>(scaled));
  if (!check(cudaDeviceSynchronize(), "make_weights")) return 1;

  const TensorRef old_v = device_view("old", old_w, n), new_v = device_view("new", new_w, n),
                  dest_v = device_view("dest", dest, n);
  auto nothing = [] { return true; };
  const double t_copy = median_seconds(reps, nothing, [&] {
    // A device-to-device cudaMemcpy returns before the copy ends: wait for it.
    return check(cudaMemcpy(dest, new_w, bytes, cudaMemcpyDeviceToDevice), "copy") &&
           check(cudaDeviceSynchronize(), "copy");
  });
  uint64_t checksum_new = 0, checksum_old = 0;
  const double t_checksum = median_seconds(reps, nothing, [&] {
    auto c = weightcast::checksum_view(new_v);
    if (c.ok()) checksum_new = *c;
    return c.ok();
  });
  auto base = weightcast::checksum_view(old_v);
  if (!base.ok()) return std::fprintf(stderr, "%s\n", base.status().message().c_str()), 1;
  checksum_old = *base;

  weightcast::EncodeOptions opt;
  opt.name = "bench.weight";
  opt.dtype = DType::kBF16;
  opt.base_checksum = checksum_old;
  weightcast::EncodedDelta enc;
  const double t_encode = median_seconds(reps, nothing, [&] {
    auto e = weightcast::encode_delta_views(old_v, new_v, opt);
    if (!e.ok()) std::fprintf(stderr, "encode: %s\n", e.status().message().c_str());
    if (e.ok()) enc = std::move(*e);
    return e.ok();
  });
  weightcast::EncodeOptions untracked = opt;
  untracked.base_checksum.reset();
  const double t_encode_untracked = median_seconds(
      reps, nothing, [&] { return weightcast::encode_delta_views(old_v, new_v, untracked).ok(); });
  auto view = weightcast::parse_delta_record(enc.record);
  if (!view.ok()) return std::fprintf(stderr, "%s\n", view.status().message().c_str()), 1;

  auto restore = [&] {
    return check(cudaMemcpy(dest, old_w, bytes, cudaMemcpyDeviceToDevice), "restore") &&
           check(cudaDeviceSynchronize(), "restore");
  };
  bool applied_ok = true;
  const double t_apply = median_seconds(reps, restore, [&] {
    auto r = weightcast::apply_delta(*view, dest_v);
    if (!r.ok()) std::fprintf(stderr, "apply: %s\n", r.status().message().c_str());
    applied_ok = applied_ok && r.ok() && r->checksum == checksum_new;
    return r.ok();
  });
  if (!check(cudaMalloc(&dev_record, enc.record.size()), "cudaMalloc record") ||
      !check(cudaMemcpy(dev_record, enc.record.data(), enc.record.size(), cudaMemcpyHostToDevice),
             "record upload"))
    return 1;
  // The host's share of an encode: the record's payload back over PCIe (pinned, as the
  // encoder's) and its framing (header, chunk table, copy, XXH3 trailer) into a new vector.
  std::vector<uint32_t> chunk_sizes;
  uint64_t payload_bytes = 0;
  for (const auto& c : view->chunks) {
    chunk_sizes.push_back(static_cast<uint32_t>(c.size()));
    payload_bytes += c.size();
  }
  const std::span<const uint8_t> payload_span(enc.record.data() + view->payload_offset,
                                              payload_bytes);
  const double t_assemble = median_seconds(reps, nothing, [&] {
    return weightcast::assemble_delta_record(enc.header, chunk_sizes, payload_span).size() ==
           enc.record.size();
  });
  uint8_t* pinned_record = nullptr;
  if (!check(cudaMallocHost(&pinned_record, enc.record.size()), "cudaMallocHost record")) return 1;
  const double t_record_d2h = median_seconds(reps, nothing, [&] {
    return check(cudaMemcpy(pinned_record, dev_record, enc.record.size(), cudaMemcpyDeviceToHost),
                 "record d2h");
  });
  cudaFreeHost(pinned_record);
  weightcast::ApplyOptions tracked;
  tracked.current_checksum = checksum_old;
  const double t_apply_device = median_seconds(reps, restore, [&] {
    auto r = weightcast::cuda_codec::apply_delta(*view, dest_v, tracked, dev_record);
    applied_ok = applied_ok && r.ok() && r->checksum == checksum_new;
    return r.ok();
  });
  std::vector<uint16_t> got(n), want(n);
  if (!check(cudaMemcpy(got.data(), dest, bytes, cudaMemcpyDeviceToHost), "read dest") ||
      !check(cudaMemcpy(want.data(), new_w, bytes, cudaMemcpyDeviceToHost), "read new"))
    return 1;
  const bool apply_equal = got == want;
  // The CPU encoder on the first 4 Mi elements, against the GPU encoder on the same range.
  const uint64_t m = std::min<uint64_t>(n, uint64_t{4} << 20);
  std::vector<uint16_t> old_h(m);
  if (!check(cudaMemcpy(old_h.data(), old_w, m * 2, cudaMemcpyDeviceToHost), "read old")) return 1;
  weightcast::EncodeOptions small = untracked;
  const auto* ob = reinterpret_cast<const uint8_t*>(old_h.data());
  const auto* nb = reinterpret_cast<const uint8_t*>(want.data());
  auto cpu = weightcast::encode_delta({ob, m * 2}, {nb, m * 2}, small);
  auto gpu = weightcast::encode_delta_views(device_view("old", old_w, m),
                                            device_view("new", new_w, m), small);
  const bool encode_equal = cpu.ok() && gpu.ok() && cpu->record == gpu->record;

  // The FP8 quantiser: the new tensor as rows of 8192 (the tail past whole rows left out).
  const int64_t fp8_cols = 8192, fp8_rows = static_cast<int64_t>(n / fp8_cols);
  TensorRef fp8_in = device_view("new (fp8)", new_w, n);
  fp8_in.shape = {fp8_rows, fp8_cols};
  const uint64_t fp8_elements = uint64_t(fp8_rows) * fp8_cols;
  const uint64_t fp8_blocks = uint64_t((fp8_rows + 127) / 128) * ((fp8_cols + 127) / 128);
  std::vector<uint8_t> fp8_q(fp8_elements);
  std::vector<float> fp8_scale(fp8_blocks);
  bool fp8_ok = fp8_rows > 0;
  const double t_fp8 = !fp8_ok ? -1 : median_seconds(reps, nothing, [&] {
    const weightcast::Status s =
        weightcast::cuda_codec::quantize_fp8_blocks(fp8_in, fp8_q, fp8_scale);
    if (!s.ok()) std::fprintf(stderr, "fp8: %s\n", s.message().c_str());
    return s.ok();
  });
  const double t_d2h = median_seconds(reps, nothing, [&] {
    return check(cudaMemcpy(fp8_q.data(), new_w, std::min<uint64_t>(fp8_elements, bytes),
                            cudaMemcpyDeviceToHost),
                 "d2h copy");
  });
  if (fp8_ok &&
      t_fp8 > 0) {  // the D2H copy above overwrote the values: quantise again, then compare
    const int64_t check_rows = std::min<int64_t>(fp8_rows, 256);
    fp8_ok = weightcast::cuda_codec::quantize_fp8_blocks(fp8_in, fp8_q, fp8_scale).ok();
    TensorRef host_in{"new (fp8, host)", DType::kBF16, {check_rows, fp8_cols}, {}, 0, want.data()};
    std::vector<uint8_t> cpu_q(uint64_t(check_rows) * fp8_cols);
    std::vector<float> cpu_scale(uint64_t((check_rows + 127) / 128) * ((fp8_cols + 127) / 128));
    fp8_ok = fp8_ok && weightcast::quantize_fp8_blocks(host_in, cpu_q, cpu_scale).ok() &&
             std::equal(cpu_q.begin(), cpu_q.end(), fp8_q.begin()) &&
             std::equal(cpu_scale.begin(), cpu_scale.end(), fp8_scale.begin());
  } else {
    fp8_ok = false;
  }

  const double copy_gbps = 2.0 * bytes / t_copy / 1e9;
  auto gbps = [](double b, double t) { return b / t / 1e9; };
  const double apply_bytes =
      double(bytes) + double(enc.record.size()) + double(view->header.changed) * 2;
  std::printf("{\n  \"elements\": %llu,\n  \"dtype\": \"bf16\",\n  \"density\": %.4f,\n",
              static_cast<unsigned long long>(n), density);
  std::printf("  \"changed\": %llu,\n  \"record_bytes\": %zu,\n  \"raw_bytes\": %llu,\n",
              static_cast<unsigned long long>(view->header.changed), enc.record.size(),
              static_cast<unsigned long long>(bytes));
  std::printf("  \"bits_per_change\": %.3f,\n  \"repetitions\": %d,\n",
              8.0 * enc.record.size() / std::max<double>(1, view->header.changed), reps);
  std::printf("  \"copy_s\": %.6f,\n  \"copy_gbps\": %.1f,\n", t_copy, copy_gbps);
  const struct {
    const char* name;
    double t, counted;
  } rows[] = {
      {"checksum", t_checksum, double(bytes)},
      {"encode", t_encode, 2.0 * bytes},
      {"encode_untracked_base", t_encode_untracked, 2.0 * bytes},
      {"apply", t_apply, apply_bytes},
      {"apply_device_record_tracked", t_apply_device, apply_bytes - bytes},
      {"fp8_quantize", t_fp8, 3.0 * fp8_elements},
      {"d2h_copy_fp8_values", t_d2h, double(fp8_elements)},
  };
  for (const auto& r : rows) {
    std::printf("  \"%s_s\": %.6f,\n  \"%s_gbps\": %.1f,\n  \"%s_vs_copy\": %.3f,\n", r.name, r.t,
                r.name, gbps(r.counted, r.t), r.name, gbps(r.counted, r.t) / copy_gbps);
  }
  std::printf("  \"encode_host_assemble_s\": %.6f,\n  \"record_d2h_pinned_s\": %.6f,\n", t_assemble,
              t_record_d2h);
  std::printf("  \"apply_time_vs_copy_time\": %.3f,\n", t_apply / t_copy);
  std::printf("  \"apply_device_record_time_vs_copy_time\": %.3f,\n", t_apply_device / t_copy);
  std::printf("  \"check_apply_equals_new\": %s,\n  \"check_apply_checksums\": %s,\n",
              apply_equal ? "true" : "false", applied_ok ? "true" : "false");
  std::printf("  \"fp8_time_vs_d2h_copy_time\": %.3f,\n", t_fp8 / t_d2h);
  std::printf("  \"check_fp8_equals_cpu_first_256_rows\": %s,\n", fp8_ok ? "true" : "false");
  std::printf("  \"check_gpu_record_equals_cpu_first_4Mi\": %s\n}\n",
              encode_equal ? "true" : "false");
  cudaFree(old_w);
  cudaFree(new_w);
  cudaFree(dest);
  cudaFree(dev_record);
  return apply_equal && applied_ok && encode_equal && fp8_ok ? 0 : 1;
}
