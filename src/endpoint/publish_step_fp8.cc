// Hooked writes to an FP8 group's selected tensor (publish_step.h, docs/DECISIONS.md "FP8
// groups"): the trainer writes its bf16/fp16/fp32 matrix through the step as for any hooked
// tensor, and the step records what the engine holds, the quantised values and the scale grid.
// A 128 x 128 block's quantisation depends on the whole block, so the unit is a band of 128
// rows: a write that covers a whole band is quantised old (still in the live matrix) and new
// (the new values) at once, before the new values go in; a write of part of a band saves the
// old bytes it overwrites in that band's buffer, and the band is quantised once its last
// element is written (old from the buffer, new from the live matrix). Only bands written part
// way hold memory (their old source bytes); no snapshot is kept.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "codec/cuda_codec.h"
#include "codec/fp8_quantize.h"
#include "src/endpoint/publish_step.h"
#include "transport/tensor_staging.h"

namespace weightcast {
namespace {

int64_t band_rows(const TensorRef& source, int64_t band) {
  return std::min(kFp8Block, source.shape[0] - band * kFp8Block);
}

// Elements [first, first + count) (flat, row-major) of the 2-D host `source` copied to `bytes`,
// or with to_source from `bytes` into it.
void copy_source_range(const TensorRef& source, uint64_t first, uint64_t count, uint8_t* bytes,
                       bool to_source) {
  const size_t es = source.element_size();
  const auto cols = static_cast<uint64_t>(source.shape[1]);
  const std::vector<int64_t> strides = source.effective_strides();
  auto* base = static_cast<uint8_t*>(source.data);
  for (uint64_t k = 0; k < count;) {
    const uint64_t e = first + k, row = e / cols, col = e % cols;
    const uint64_t run = std::min(cols - col, count - k);
    const int64_t at = source.offset + static_cast<int64_t>(row) * strides[0] +
                       static_cast<int64_t>(col) * strides[1];
    uint8_t* p = base + at * static_cast<int64_t>(es);
    if (strides[1] == 1) {
      to_source ? std::memcpy(p, bytes + k * es, run * es)
                : std::memcpy(bytes + k * es, p, run * es);
    } else {
      for (uint64_t j = 0; j < run; ++j) {
        uint8_t* elem = p + static_cast<int64_t>(j) * strides[1] * static_cast<int64_t>(es);
        to_source ? std::memcpy(elem, bytes + (k + j) * es, es)
                  : std::memcpy(bytes + (k + j) * es, elem, es);
      }
    }
    k += run;
  }
}

// A contiguous CUDA range of `count` elements starting `first` elements into `ref`.
TensorRef cuda_range(const TensorRef& ref, uint64_t first, uint64_t count) {
  TensorRef r =
      TensorRef::contiguous(ref.name, ref.dtype, ref.first_byte() + first * ref.element_size(),
                            static_cast<int64_t>(count));
  r.memory = ref.memory;
  r.device = ref.device;
  return r;
}

// quantize_fp8_blocks of a host view or, on its GPU, of a CUDA one.
Status quantise(const TensorRef& in, std::span<uint8_t> q, std::span<float> scales) {
  return in.memory == MemoryKind::kCuda ? cuda_codec::quantize_fp8_blocks(in, q, scales)
                                        : quantize_fp8_blocks(in, q, scales);
}

}  // namespace

Status PublishStep::record_fp8_band(Hooked& h, int64_t band, const TensorRef& old_band,
                                    const TensorRef& new_band) {
  const int64_t cols = h.live.shape[1], grid_cols = fp8_scale_cols(cols);
  const auto elements = static_cast<size_t>(band_rows(h.live, band) * cols);
  thread_local std::vector<uint8_t> old_q, new_q;
  thread_local std::vector<float> old_s, new_s;
  old_q.resize(elements);
  new_q.resize(elements);
  old_s.resize(static_cast<size_t>(grid_cols));
  new_s.resize(static_cast<size_t>(grid_cols));
  RETURN_IF_ERROR(quantise(old_band, old_q, old_s));
  RETURN_IF_ERROR(quantise(new_band, new_q, new_s));
  const uint64_t first = static_cast<uint64_t>(band * kFp8Block * cols);
  const uint64_t first_scale = static_cast<uint64_t>(band * grid_cols);
  RETURN_IF_ERROR(h.recorder->record(first, elements, old_q.data(), new_q.data()));
  RETURN_IF_ERROR(h.fp8->scales->record(first_scale, old_s.size(),
                                        reinterpret_cast<const uint8_t*>(old_s.data()),
                                        reinterpret_cast<const uint8_t*>(new_s.data())));
  std::memcpy(h.fp8->scale_inv + first_scale, new_s.data(), new_s.size() * sizeof(float));
  if (anchor_) {
    RETURN_IF_ERROR(anchor_->write(h.tensor, first, new_q));
    RETURN_IF_ERROR(anchor_->write(
        h.fp8->scale_tensor, first_scale,
        {reinterpret_cast<const uint8_t*>(new_s.data()), new_s.size() * sizeof(float)}));
  }
  return ok_status();
}

Status PublishStep::write_fp8(Hooked& h, uint64_t first, const TensorRef& live_view,
                              const TensorRef& new_values) {
  const TensorRef& source = h.live;
  const bool cuda = source.memory == MemoryKind::kCuda;
  if (cuda && (!live_view.is_contiguous() || !source.is_contiguous())) {
    return invalid_argument("CUDA view '" + live_view.name + "' of FP8 tensor '" + source.name +
                            "' is strided; hooked CUDA writes take contiguous views");
  }
  const auto written_twice = [this](const std::string& name, uint64_t g, uint64_t count) {
    return invalid_argument("FP8 tensor '" + name + "': elements " + std::to_string(g) + ".." +
                            std::to_string(g + count - 1) +
                            " (or others of their 128-row band) "
                            "written twice in the step of version " +
                            std::to_string(version_));
  };
  const size_t es = source.element_size();
  const auto cols = static_cast<uint64_t>(source.shape[1]);
  const uint64_t band_elements = static_cast<uint64_t>(kFp8Block) * cols;
  const uint64_t n = live_view.numel();
  std::vector<uint8_t> staged;  // CUDA new values, brought to the host to be written
  for (uint64_t j = 0; j < n;) {
    const uint64_t g = first + j;
    const auto band = static_cast<int64_t>(g / band_elements);
    const uint64_t in_band = g % band_elements;
    const auto rows = band_rows(source, band);
    const uint64_t whole = static_cast<uint64_t>(rows) * cols;
    const uint64_t count = std::min(whole - in_band, n - j);
    const uint8_t* in = new_values.first_byte() + j * es;
    if (new_values.memory == MemoryKind::kCuda) {
      staged.resize(count * es);
      RETURN_IF_ERROR(gather_tensor(cuda_range(new_values, j, count), staged));
      in = staged.data();
    }
    const auto put_new = [&]() -> Status {
      if (cuda) return scatter_tensor({in, count * es}, cuda_range(source, g, count));
      copy_source_range(source, g, count, const_cast<uint8_t*>(in), true);
      return ok_status();
    };
    if (in_band == 0 && count == whole) {
      // The whole band in this write: old from the live matrix, new from the new values.
      {
        std::lock_guard<std::mutex> lock(h.fp8->mu);
        if (h.fp8->done[static_cast<size_t>(band)] || h.fp8->bands.count(band) != 0) {
          return written_twice(source.name, g, count);
        }
        h.fp8->done[static_cast<size_t>(band)] = 1;
      }
      TensorRef fresh = new_values;  // elements [j, j + count) of the new values, contiguous
      fresh.strides.clear();
      fresh.shape = {rows, static_cast<int64_t>(cols)};
      fresh.offset = new_values.offset + static_cast<int64_t>(j);
      RETURN_IF_ERROR(record_fp8_band(h, band, source.rows(band * kFp8Block, rows), fresh));
      RETURN_IF_ERROR(put_new());
      j += count;
      continue;
    }
    // Part of a band: keep the old bytes it overwrites until the band is whole.
    uint8_t* keep = nullptr;
    {
      std::lock_guard<std::mutex> lock(h.fp8->mu);
      Fp8Band& b = h.fp8->bands[band];
      auto next = b.runs.lower_bound(in_band);
      const bool overlaps = (next != b.runs.end() && next->first < in_band + count) ||
                            (next != b.runs.begin() && std::prev(next)->second > in_band);
      if (overlaps || h.fp8->done[static_cast<size_t>(band)]) {
        return written_twice(source.name, g, count);
      }
      if (b.old_bytes.empty()) b.old_bytes.resize(whole * es);
      b.runs.emplace(in_band, in_band + count);
      keep = b.old_bytes.data() + in_band * es;
    }
    if (cuda) {
      RETURN_IF_ERROR(gather_tensor(cuda_range(source, g, count), {keep, count * es}));
    } else {
      copy_source_range(source, g, count, keep, false);
    }
    RETURN_IF_ERROR(put_new());
    std::optional<Fp8Band> finished;  // set for the write that completes the band
    {
      std::lock_guard<std::mutex> lock(h.fp8->mu);
      auto b = h.fp8->bands.find(band);
      b->second.written += count;
      if (b->second.written == whole) {
        finished = std::move(b->second);
        h.fp8->bands.erase(b);
        h.fp8->done[static_cast<size_t>(band)] = 1;
      }
    }
    if (finished) {
      TensorRef old_band = TensorRef::contiguous(
          source.name, source.dtype, finished->old_bytes.data(), static_cast<int64_t>(whole));
      old_band.shape = {rows, static_cast<int64_t>(cols)};
      RETURN_IF_ERROR(record_fp8_band(h, band, old_band, source.rows(band * kFp8Block, rows)));
    }
    j += count;
  }
  return ok_status();
}

}  // namespace weightcast
