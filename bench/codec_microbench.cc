// Micro-benchmarks of the codec's inner pieces, each next to its memory reference (memcmp of
// the same bytes) so ratios survive noisy shared machines. Headline figures:
// bench/run_delta_bench.sh.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "codec/change_capture.h"
#include "codec/change_scan.h"
#include "codec/checksum.h"
#include "codec/chunk_decode_hd.h"
#include "codec/deferred_encoder.h"
#include "codec/delta_recorder.h"
#include "codec/streamvbyte_gaps.h"

namespace {

constexpr size_t kElements = size_t{1} << 24;  // 32 MiB of bf16

const std::vector<uint8_t>& buffer(int which) {
  static std::vector<uint8_t> a, b;
  if (a.empty()) {
    std::mt19937_64 rng(1);
    a.resize(kElements * 2);
    for (size_t i = 0; i < a.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(a.data() + i, &v, 8);
    }
    b = a;
    for (size_t i = 0; i < kElements; ++i) {
      if (rng() % 100 == 0) b[2 * i] ^= 1;  // 1 % density, at random places
    }
  }
  return which == 0 ? a : b;
}

void BM_MemcmpReference(benchmark::State& state) {
  const auto& a = buffer(0);
  std::vector<uint8_t> copy = a;
  for (auto _ : state) benchmark::DoNotOptimize(std::memcmp(a.data(), copy.data(), a.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * a.size() * 2));
}
BENCHMARK(BM_MemcmpReference)->Unit(benchmark::kMillisecond);

void BM_ScanChanges(benchmark::State& state) {
  const auto& a = buffer(0);
  const auto& b = buffer(1);
  std::vector<uint32_t> positions(1u << 16);
  for (auto _ : state) {
    uint64_t total = 0;
    for (size_t c = 0; c < kElements; c += 1u << 16) {
      total += weightcast::scan_changes(a.data() + 2 * c, b.data() + 2 * c, 1u << 16, 2,
                                        positions.data());
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * a.size() * 2));
}
BENCHMARK(BM_ScanChanges)->Unit(benchmark::kMillisecond);

void BM_Checksum(benchmark::State& state) {
  const auto& a = buffer(0);
  for (auto _ : state)
    benchmark::DoNotOptimize(weightcast::checksum_range(a.data(), 2, kElements, 0));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * a.size()));
}
BENCHMARK(BM_Checksum)->Unit(benchmark::kMillisecond);

void BM_RiceVsStreamVByteGaps(benchmark::State& state) {
  std::vector<uint32_t> positions;
  std::mt19937 rng(3);
  std::geometric_distribution<uint32_t> gap(0.01);
  for (uint32_t p = gap(rng); p < (1u << 16); p += 1 + gap(rng)) positions.push_back(p);
  const auto n = static_cast<uint32_t>(positions.size());
  constexpr uint32_t kLength = 1u << 16;
  std::vector<uint8_t> out(weightcast::streamvbyte_gaps_capacity(n) + 4 * size_t{n} +
                           weightcast::kBitSinkSlack);
  std::vector<uint32_t> back(n);
  size_t written = 0;
  const bool rice = state.range(0) == 1;
  for (auto _ : state) {
    namespace hd = weightcast::hd;
    if (rice) {
      unsigned k = 0;
      uint64_t bytes = 0;
      hd::plan_rice(positions.data(), n, &k, &bytes);
      written =
          static_cast<size_t>(hd::write_rice_gaps(out.data(), positions.data(), n, k) - out.data());
      hd::ChunkHead head;
      head.mode = static_cast<uint8_t>(weightcast::ChunkMode::kGapsRice);
      head.rice_k = static_cast<uint8_t>(k);
      head.changed = n;
      benchmark::DoNotOptimize(hd::decode_positions(
          head, out.data(), static_cast<uint32_t>(written), kLength, back.data()));
    } else {
      written = static_cast<size_t>(
          weightcast::write_streamvbyte_gaps(out.data(), positions.data(), n) - out.data());
      benchmark::DoNotOptimize(weightcast::decode_streamvbyte_gaps(
          out.data(), static_cast<uint32_t>(written), n, kLength, back.data()));
    }
  }
  if (back != positions) state.SkipWithError("the gaps did not decode to their positions");
  state.counters["bits_per_gap"] =
      8.0 * static_cast<double>(written) / static_cast<double>(positions.size());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * positions.size()));
}
BENCHMARK(BM_RiceVsStreamVByteGaps)->Arg(0)->Arg(1)->ArgNames({"rice"});

}  // namespace

// Hooked mode's write pass (src/endpoint/publish_step.h) against its reference, a plain copy
// of the same new values into the live tensor: per 64 Ki-element chunk, the recorder compares
// the old live values with the new ones while it copies them over, then encodes the chunk.
// Each iteration first puts the old values back, untimed, so both start from the same memory.
void BM_PlainCopyReference(benchmark::State& state) {
  const auto& before = buffer(0);
  const auto& after = buffer(1);
  std::vector<uint8_t> live = before;
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(live.data(), before.data(), live.size());
    state.ResumeTiming();
    std::memcpy(live.data(), after.data(), live.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * live.size()));
}
BENCHMARK(BM_PlainCopyReference)->Unit(benchmark::kMillisecond);

void BM_RecordedWrite(benchmark::State& state) {
  const auto& before = buffer(0);
  const auto& after = buffer(1);
  std::vector<uint8_t> live = before;
  weightcast::EncodeOptions e;
  e.name = "bench";
  e.dtype = weightcast::DType::kBF16;
  e.base_checksum = 0;  // the records are not applied here
  constexpr size_t kChunk = weightcast::kDefaultChunkElements;
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(live.data(), before.data(), live.size());
    auto recorder = weightcast::DeltaRecorder::create(e, kElements);
    state.ResumeTiming();
    for (size_t at = 0; at < kElements; at += kChunk) {
      const size_t n = std::min(kChunk, kElements - at);
      // As PublishStep::write does for a contiguous live view: compare and copy in one pass.
      if (!(*recorder)->record_write(at, n, live.data() + 2 * at, after.data() + 2 * at).ok()) {
        state.SkipWithError("record failed");
        break;
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * live.size()));
}
BENCHMARK(BM_RecordedWrite)->Unit(benchmark::kMillisecond);

// The same on an 8 MiB piece that is already in cache (as the demo trainer's pieces are: it has
// just swapped them in): the scan fused with the copy, against memcpy.
constexpr size_t kWarmBytes = size_t{8} << 20;
void BM_WarmPlainCopy(benchmark::State& state) {
  std::vector<uint8_t> live(buffer(0).begin(), buffer(0).begin() + kWarmBytes);
  const std::vector<uint8_t> fresh(buffer(1).begin(), buffer(1).begin() + kWarmBytes);
  for (auto _ : state) {
    std::memcpy(live.data(), fresh.data(), kWarmBytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kWarmBytes));
}
BENCHMARK(BM_WarmPlainCopy)->Unit(benchmark::kMicrosecond);

void BM_WarmScanAndCopy(benchmark::State& state) {
  const std::vector<uint8_t> before(buffer(0).begin(), buffer(0).begin() + kWarmBytes);
  std::vector<uint8_t> live = before;
  const std::vector<uint8_t> fresh(buffer(1).begin(), buffer(1).begin() + kWarmBytes);
  constexpr uint32_t kChunk = weightcast::kDefaultChunkElements;
  std::vector<uint32_t> positions(kChunk), old_bits(kChunk);
  for (auto _ : state) {
    for (size_t at = 0; at < kWarmBytes; at += 2 * kChunk) {
      benchmark::DoNotOptimize(weightcast::scan_and_copy_changes(
          live.data() + at, fresh.data() + at, kChunk, 2, positions.data(), old_bits.data()));
    }
    state.PauseTiming();
    live = before;
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kWarmBytes));
}
BENCHMARK(BM_WarmScanAndCopy)->Unit(benchmark::kMicrosecond);

// What a hooked write costs with a deferred encoder: the capture alone (change_capture.h).
void BM_WarmCaptureAndCopy(benchmark::State& state) {
  const std::vector<uint8_t> before(buffer(0).begin(), buffer(0).begin() + kWarmBytes);
  std::vector<uint8_t> live = before;
  const std::vector<uint8_t> fresh(buffer(1).begin(), buffer(1).begin() + kWarmBytes);
  constexpr uint32_t kChunk = weightcast::kDefaultChunkElements;
  std::vector<uint8_t> capture(weightcast::capture_bytes(kChunk, 2));
  for (auto _ : state) {
    for (size_t at = 0; at < kWarmBytes; at += 2 * kChunk) {
      benchmark::DoNotOptimize(weightcast::capture_and_copy_changes(
          live.data() + at, fresh.data() + at, kChunk, 2, capture.data()));
    }
    state.PauseTiming();
    live = before;
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kWarmBytes));
}
BENCHMARK(BM_WarmCaptureAndCopy)->Unit(benchmark::kMicrosecond);

// The whole hooked write as PublishStep::write does it for a contiguous host view: the
// recorder's capture into a DeferredEncoder's slots (the encoding runs on its worker and is
// not timed; it is drained between iterations).
void BM_WarmRecordedWriteDeferred(benchmark::State& state) {
  const std::vector<uint8_t> before(buffer(0).begin(), buffer(0).begin() + kWarmBytes);
  std::vector<uint8_t> live = before;
  const std::vector<uint8_t> fresh(buffer(1).begin(), buffer(1).begin() + kWarmBytes);
  constexpr uint32_t kChunk = weightcast::kDefaultChunkElements;
  constexpr size_t kElementsWarm = kWarmBytes / 2;
  weightcast::EncodeOptions e;
  e.name = "bench";
  e.dtype = weightcast::DType::kBF16;
  e.base_checksum = 0;  // the records are not applied here
  weightcast::DeferredEncoder encoder(32, weightcast::capture_bytes(kChunk, 2));
  for (auto _ : state) {
    state.PauseTiming();
    auto recorder = weightcast::DeltaRecorder::create(e, kElementsWarm);
    state.ResumeTiming();
    if (!(*recorder)->record_write(0, kElementsWarm, live.data(), fresh.data(), &encoder).ok()) {
      state.SkipWithError("record failed");
      break;
    }
    state.PauseTiming();
    encoder.drain();
    live = before;
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kWarmBytes));
}
BENCHMARK(BM_WarmRecordedWriteDeferred)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
