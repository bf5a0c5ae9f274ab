#include "src/endpoint/publish_step.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>

#include "codec/change_capture.h"
#include "transport/fs/journal_layout.h"
#include "transport/tensor_staging.h"

namespace weightcast {
namespace {

// Elements handled per pass of a write: one delta chunk, so that its old and new bytes are
// still in cache when the new ones are written over the old.
constexpr uint64_t kPieceElements = kDefaultChunkElements;
// Captures waiting for the step's encoder thread, at most (each one chunk's, change_capture.h).
constexpr size_t kEncoderSlots = 32;
// CUDA writes go through host staging in pieces of at most this many bytes.
constexpr uint64_t kCudaPieceBytes = uint64_t{8} << 20;

// The flat row-major index, in `tensor`, of the element `offset` elements past its first one;
// nullopt when no element of `tensor` lies there.
std::optional<uint64_t> logical_index(const TensorRef& tensor, int64_t offset) {
  if (offset < 0) return std::nullopt;
  if (tensor.is_contiguous()) {
    if (static_cast<uint64_t>(offset) >= tensor.numel()) return std::nullopt;
    return static_cast<uint64_t>(offset);
  }
  const std::vector<int64_t> strides = tensor.effective_strides();
  std::vector<size_t> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  std::vector<int64_t> index(strides.size(), 0);
  int64_t rest = offset;
  for (const size_t d : order) {
    if (tensor.shape[d] == 1) continue;
    if (strides[d] <= 0) return std::nullopt;
    index[d] = rest / strides[d];
    rest %= strides[d];
    if (index[d] >= tensor.shape[d]) return std::nullopt;
  }
  if (rest != 0) return std::nullopt;
  uint64_t flat = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    flat = flat * static_cast<uint64_t>(tensor.shape[d]) + static_cast<uint64_t>(index[d]);
  }
  return flat;
}

// Whether walking `view` row-major visits `tensor`'s elements first, first + 1, ...: checked at
// every start of a row of either, where the two innermost strides must agree.
bool maps_consecutively(const TensorRef& tensor, uint64_t first, const TensorRef& view,
                        int64_t view_offset) {
  const uint64_t n = view.numel();
  if (first + n > tensor.numel()) return false;
  if (tensor.is_contiguous() && view.is_contiguous()) return true;
  const ElementAddresser at_tensor(tensor), at_view(view);
  const auto inner = [](const TensorRef& t) {
    return t.shape.empty() ? uint64_t{1}
                           : static_cast<uint64_t>(std::max<int64_t>(1, t.shape.back()));
  };
  const auto inner_stride = [](const TensorRef& t) {
    return t.shape.empty() ? int64_t{1} : t.effective_strides().back();
  };
  const uint64_t tensor_row = inner(tensor), view_row = inner(view);
  for (uint64_t j = 0; j < n;) {
    const uint64_t run =
        std::min({tensor_row - (first + j) % tensor_row, view_row - j % view_row, n - j});
    if (at_tensor.offset_of(first + j) != view_offset + at_view.offset_of(j)) return false;
    if (run > 1 && inner_stride(tensor) != inner_stride(view)) return false;
    j += run;
  }
  return true;
}

// Copies elements [j, j + count) of a host view to `bytes` (row-major) or, with to_view, from
// `bytes` into the view (then `bytes` is only read); runs along the innermost dimension.
void copy_view_run(const TensorRef& view, const ElementAddresser& at, uint64_t j, uint64_t count,
                   uint8_t* bytes, bool to_view) {
  const size_t es = view.element_size();
  if (at.contiguous()) {
    uint8_t* p = view.first_byte() + j * es;
    to_view ? std::memcpy(p, bytes, count * es) : std::memcpy(bytes, p, count * es);
    return;
  }
  const uint64_t row = view.shape.empty() ? 1 : static_cast<uint64_t>(view.shape.back());
  const int64_t stride = view.shape.empty() ? 1 : view.effective_strides().back();
  for (uint64_t k = 0; k < count;) {
    const uint64_t run = std::min(row - (j + k) % row, count - k);
    uint8_t* p = view.first_byte() + at.offset_of(j + k) * static_cast<int64_t>(es);
    for (uint64_t e = 0; e < run; ++e) {
      uint8_t* elem = p + static_cast<int64_t>(e) * stride * static_cast<int64_t>(es);
      to_view ? std::memcpy(elem, bytes + (k + e) * es, es)
              : std::memcpy(bytes + (k + e) * es, elem, es);
    }
    k += run;
  }
}

}  // namespace

PublishStep::PublishStep(uint64_t version, std::vector<Hooked> hooked)
    : version_(version), hooked_(std::move(hooked)) {
  for (size_t i = 0; i < hooked_.size(); ++i) {
    const TensorRef& t = hooked_[i].live;
    if (t.numel() == 0) continue;
    const std::vector<int64_t> strides = t.effective_strides();
    int64_t low = 0, high = 0;  // element offsets from the first element
    for (size_t d = 0; d < t.shape.size(); ++d) {
      (strides[d] < 0 ? low : high) += (t.shape[d] - 1) * strides[d];
    }
    const auto es = static_cast<int64_t>(t.element_size());
    const auto first = reinterpret_cast<uintptr_t>(t.first_byte());
    extents_.push_back({first + low * es, first + (high + 1) * es, i});
  }
  size_t widest = 0;  // the largest element among hooked host tensors
  for (const auto& h : hooked_) {
    if (h.live.memory != MemoryKind::kCuda) widest = std::max(widest, h.live.element_size());
  }
  if (widest > 0) {
    encoder_ = std::make_unique<DeferredEncoder>(
        kEncoderSlots, capture_bytes(static_cast<uint32_t>(kPieceElements), widest));
  }
  std::sort(extents_.begin(), extents_.end(),
            [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  uintptr_t reach = 0;
  for (const auto& e : extents_) reach_.push_back(reach = std::max(reach, e.end));
}

PublishStep::~PublishStep() {
  encoder_.reset();  // runs what the writes left, while the recorders and live tensors exist
  anchor_.reset();
  if (!anchor_dir_.empty()) (void)remove_tree(anchor_dir_);  // best effort: a dropped step
}

StepProgress PublishStep::progress() const {
  StepProgress p;
  for (const auto& h : hooked_) {
    p.elements_written += h.recorder->written();
    p.elements_total += h.recorder->elements();
    p.changed_elements += h.recorder->changed();
    p.pending_chunks += h.recorder->pending_chunks();
  }
  return p;
}

Status PublishStep::write(const TensorRef& live_view, const TensorRef& new_values) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (published_) {
      return failed_precondition("step of version " + std::to_string(version_) +
                                 " written after publish_step");
    }
    if (!failed_.ok()) return failed_;
  }
  const auto fail = [&](Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.ok()) failed_ = s;
    return s;
  };
  if (Status valid = live_view.validate(); !valid.ok()) return fail(valid);
  if (new_values.dtype != live_view.dtype || new_values.numel() != live_view.numel()) {
    return fail(invalid_argument(
        "step of version " + std::to_string(version_) + ": new values '" + new_values.name + "' (" +
        std::string(dtype_name(new_values.dtype)) + ", " + std::to_string(new_values.numel()) +
        " elements) do not match '" + live_view.name + "' (" +
        std::string(dtype_name(live_view.dtype)) + ", " + std::to_string(live_view.numel()) + ")"));
  }
  if (!new_values.is_contiguous()) {
    return fail(invalid_argument("new values '" + new_values.name + "' are not contiguous"));
  }
  // The hooked tensors whose bytes span the view's first byte, from the nearest start down
  // (one, unless registered tensors interleave, as strided views of one packed parameter).
  const auto at = reinterpret_cast<uintptr_t>(live_view.first_byte());
  auto it = std::upper_bound(extents_.begin(), extents_.end(), at,
                             [](uintptr_t a, const Extent& e) { return a < e.begin; });
  for (size_t k = static_cast<size_t>(it - extents_.begin()); k-- > 0 && reach_[k] > at;) {
    if (extents_[k].end <= at) continue;
    Hooked& h = hooked_[extents_[k].hooked];
    const bool cuda = live_view.memory == MemoryKind::kCuda;
    if ((h.live.memory == MemoryKind::kCuda) != cuda ||
        (cuda && h.live.device != live_view.device) || h.live.dtype != live_view.dtype) {
      continue;
    }
    const auto es = static_cast<int64_t>(live_view.element_size());
    const int64_t bytes = live_view.first_byte() - h.live.first_byte();
    if (bytes % es != 0) continue;
    const auto first = logical_index(h.live, bytes / es);
    if (!first) continue;
    if (!maps_consecutively(h.live, *first, live_view, bytes / es)) {
      return fail(invalid_argument(
          "view '" + live_view.name + "' of tensor '" + h.live.name +
          "' is not a run of its consecutive elements (rows or a flat range, row-major)"));
    }
    Status s = h.fp8 ? write_fp8(h, *first, live_view, new_values)
               : live_view.memory == MemoryKind::kCuda
                   ? write_cuda(h, *first, live_view, new_values)
                   : write_host(h, *first, live_view, new_values);
    return s.ok() ? s : fail(s);
  }
  return fail(invalid_argument("view '" + live_view.name + "' (" +
                               std::to_string(live_view.numel()) +
                               " elements) lies in no tensor registered as hooked"));
}

Status PublishStep::write_host(Hooked& h, uint64_t first, const TensorRef& live_view,
                               const TensorRef& new_values) {
  const size_t es = live_view.element_size();
  const uint64_t n = live_view.numel();
  const ElementAddresser at(live_view);
  const uint8_t* in = new_values.first_byte();
  if (at.contiguous()) {
    // Compared and copied in one pass per chunk (DeltaRecorder::record_write).
    RETURN_IF_ERROR(h.recorder->record_write(first, n, live_view.first_byte(), in, encoder_.get()));
    if (anchor_) RETURN_IF_ERROR(anchor_->write(h.tensor, first, {in, n * es}));
    return ok_status();
  }
  thread_local std::vector<uint8_t> old_piece;
  for (uint64_t j = 0; j < n;) {
    // Pieces end on delta chunk boundaries of the tensor, so whole chunks encode in place.
    const uint64_t g = first + j;
    const uint64_t count = std::min(kPieceElements - g % kPieceElements, n - j);
    old_piece.resize(count * es);
    copy_view_run(live_view, at, j, count, old_piece.data(), false);
    RETURN_IF_ERROR(h.recorder->record(g, count, old_piece.data(), in + j * es));
    copy_view_run(live_view, at, j, count, const_cast<uint8_t*>(in + j * es), true);
    j += count;
  }
  if (anchor_) RETURN_IF_ERROR(anchor_->write(h.tensor, first, {in, n * es}));
  return ok_status();
}

Status PublishStep::write_cuda(Hooked& h, uint64_t first, const TensorRef& live_view,
                               const TensorRef& new_values) {
  if (!live_view.is_contiguous()) {
    return invalid_argument("CUDA view '" + live_view.name +
                            "' is strided; hooked CUDA writes take contiguous views");
  }
  const size_t es = live_view.element_size();
  const uint64_t n = live_view.numel();
  const uint64_t piece =
      std::max<uint64_t>(kPieceElements, kCudaPieceBytes / es / kPieceElements * kPieceElements);
  std::vector<uint8_t> old_bytes, new_bytes;
  const auto sub = [&](const TensorRef& v, uint64_t j, uint64_t count) {
    TensorRef s = TensorRef::contiguous(v.name, v.dtype, v.first_byte() + j * es,
                                        static_cast<int64_t>(count));
    s.memory = v.memory;
    s.device = v.device;
    return s;
  };
  for (uint64_t j = 0; j < n;) {
    const uint64_t g = first + j;
    const uint64_t count = std::min(piece - g % kPieceElements, n - j);
    old_bytes.resize(count * es);
    RETURN_IF_ERROR(gather_tensor(sub(live_view, j, count), old_bytes));
    const uint8_t* in = new_values.first_byte() + j * es;
    if (new_values.memory == MemoryKind::kCuda) {
      new_bytes.resize(count * es);
      RETURN_IF_ERROR(gather_tensor(sub(new_values, j, count), new_bytes));
      in = new_bytes.data();
    }
    RETURN_IF_ERROR(h.recorder->record(g, count, old_bytes.data(), in));
    RETURN_IF_ERROR(scatter_tensor({in, count * es}, sub(live_view, j, count)));
    if (anchor_) RETURN_IF_ERROR(anchor_->write(h.tensor, g, {in, count * es}));
    j += count;
  }
  return ok_status();
}

}  // namespace weightcast
