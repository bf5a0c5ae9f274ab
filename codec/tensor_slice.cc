#include "codec/tensor_slice.h"

#include <algorithm>

namespace weightcast {
namespace {

uint64_t elements_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Row-major strides of the global shape, in elements.
std::vector<uint64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<uint64_t> st(shape.size(), 1);
  for (size_t e = shape.size(); e-- > 1;) st[e - 1] = st[e] * static_cast<uint64_t>(shape[e]);
  return st;
}

// A box as runs: the runs are indexed by the multi-index over dimensions [0, inner) of the
// box; each run covers the box's extent along `inner` and whole dimensions after it.
struct BoxRuns {
  std::vector<uint64_t> st;  // global strides
  size_t inner = 0;
  uint64_t length = 0;  // elements per run
  uint64_t count = 0;   // runs

  BoxRuns(const std::vector<int64_t>& shape, const TensorSlice& s) : st(strides_of(shape)) {
    const size_t n = shape.size();
    if (n == 0) {
      length = count = 1;
      return;
    }
    inner = n - 1;
    while (inner > 0 && s.offsets[inner] == 0 && s.sizes[inner] == shape[inner]) --inner;
    length = static_cast<uint64_t>(s.sizes[inner]) * st[inner];
    count = 1;
    for (size_t e = 0; e < inner; ++e) count *= static_cast<uint64_t>(s.sizes[e]);
    if (length == 0) count = 0;
  }
  uint64_t global(const TensorSlice& s, uint64_t r) const {
    if (st.empty()) return 0;
    uint64_t g = static_cast<uint64_t>(s.offsets[inner]) * st[inner];
    for (size_t e = inner; e-- > 0;) {
      const auto z = static_cast<uint64_t>(s.sizes[e]);
      g += (static_cast<uint64_t>(s.offsets[e]) + r % z) * st[e];
      r /= z;
    }
    return g;
  }
};

// The first element `a` and `b` both hold, if any.
std::optional<uint64_t> first_shared(const std::vector<int64_t>& shape, const TensorSlice& a,
                                     const TensorSlice& b) {
  if (a.kind == TensorSlice::Kind::kBox && b.kind == TensorSlice::Kind::kBox) {
    const std::vector<uint64_t> st = strides_of(shape);
    uint64_t g = 0;
    for (size_t e = 0; e < shape.size(); ++e) {
      const int64_t lo = std::max(a.offsets[e], b.offsets[e]);
      const int64_t hi = std::min(a.offsets[e] + a.sizes[e], b.offsets[e] + b.sizes[e]);
      if (lo >= hi) return std::nullopt;
      g += static_cast<uint64_t>(lo) * st[e];
    }
    return g;
  }
  std::optional<uint64_t> found;
  for_each_shared_run(shape, a, b, [&](const SharedRun& r) {
    found = r.global;
    return false;
  });
  return found;
}

// The first element no slice holds (the slices overlap nowhere).
uint64_t first_hole(const std::vector<int64_t>& shape, const std::vector<RankSlice>& slices) {
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (const auto& s : slices) {
    for_each_slice_run(shape, s.slice, [&](const SliceRun& r) {
      runs.emplace_back(r.global, r.global + r.count);
      return true;
    });
  }
  std::sort(runs.begin(), runs.end());
  uint64_t covered = 0;
  for (const auto& [b, e] : runs) {
    if (b > covered) return covered;
    covered = std::max(covered, e);
  }
  return covered;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t e = 0; e < shape.size(); ++e) s += (e ? ", " : "") + std::to_string(shape[e]);
  return s + "]";
}

}  // namespace

TensorSlice TensorSlice::whole(const std::vector<int64_t>& shape) {
  return box(std::vector<int64_t>(shape.size(), 0), shape);
}

TensorSlice TensorSlice::box(std::vector<int64_t> offsets, std::vector<int64_t> sizes) {
  TensorSlice s;
  s.kind = Kind::kBox;
  s.offsets = std::move(offsets);
  s.sizes = std::move(sizes);
  return s;
}

TensorSlice TensorSlice::flat(uint64_t begin, uint64_t end) {
  TensorSlice s;
  s.kind = Kind::kFlat;
  s.begin = begin;
  s.end = end;
  return s;
}

Result<TensorSlice> TensorSlice::split(const std::vector<int64_t>& shape, int64_t dim,
                                       int64_t parts, int64_t index) {
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size()) || parts <= 0 || index < 0 ||
      index >= parts) {
    return invalid_argument("cannot take part " + std::to_string(index) + " of " +
                            std::to_string(parts) + " along dimension " + std::to_string(dim) +
                            " of shape " + shape_text(shape));
  }
  TensorSlice s = whole(shape);
  const int64_t extent = shape[static_cast<size_t>(dim)];
  const int64_t base = extent / parts, longer = extent % parts;
  s.offsets[static_cast<size_t>(dim)] = index * base + std::min(index, longer);
  s.sizes[static_cast<size_t>(dim)] = base + (index < longer ? 1 : 0);
  return s;
}

Status check_slice(const std::string& tensor, const std::vector<int64_t>& shape,
                   const TensorSlice& slice) {
  const std::string who =
      "tensor '" + tensor + "' " + shape_text(shape) + ": slice " + describe_slice(slice);
  if (slice.kind == TensorSlice::Kind::kFlat) {
    if (slice.begin > slice.end || slice.end > elements_of(shape)) {
      return invalid_argument(who + " is not a range of its " + std::to_string(elements_of(shape)) +
                              " elements");
    }
    return ok_status();
  }
  if (slice.offsets.size() != shape.size() || slice.sizes.size() != shape.size()) {
    return invalid_argument(who + " has " + std::to_string(slice.offsets.size()) +
                            " dimensions, the tensor " + std::to_string(shape.size()));
  }
  for (size_t e = 0; e < shape.size(); ++e) {
    if (slice.offsets[e] < 0 || slice.sizes[e] < 0 || slice.offsets[e] > shape[e] ||
        slice.sizes[e] > shape[e] - slice.offsets[e]) {
      return invalid_argument(who + " leaves the tensor along dimension " + std::to_string(e));
    }
  }
  return ok_status();
}

uint64_t slice_elements(const std::vector<int64_t>& shape, const TensorSlice& slice) {
  if (slice.kind == TensorSlice::Kind::kFlat) return slice.end - slice.begin;
  (void)shape;
  return elements_of(slice.sizes);
}

std::string describe_slice(const TensorSlice& slice) {
  if (slice.kind == TensorSlice::Kind::kFlat) {
    return "elements [" + std::to_string(slice.begin) + ", " + std::to_string(slice.end) + ")";
  }
  // Any box is described, a malformed one too (check_slice names it): offsets and sizes of
  // different lengths, or an end past int64.
  if (slice.offsets.size() != slice.sizes.size()) {
    return "offsets " + shape_text(slice.offsets) + " sizes " + shape_text(slice.sizes);
  }
  std::string s = "[";
  for (size_t e = 0; e < slice.offsets.size(); ++e) {
    int64_t end = 0;
    const bool overflow = __builtin_add_overflow(slice.offsets[e], slice.sizes[e], &end);
    s += (e ? ", " : "") + std::to_string(slice.offsets[e]) + ":" +
         (overflow ? "+" + std::to_string(slice.sizes[e]) : std::to_string(end));
  }
  return s + "]";
}

std::string describe_element(const std::vector<int64_t>& shape, uint64_t global) {
  const std::vector<uint64_t> st = strides_of(shape);
  std::string s = "[";
  for (size_t e = 0; e < shape.size(); ++e) {
    s += (e ? ", " : "") + std::to_string(global / st[e]);
    global %= st[e];
  }
  return s + "]";
}

void for_each_slice_run(const std::vector<int64_t>& shape, const TensorSlice& slice, uint64_t lo,
                        uint64_t hi, const std::function<bool(const SliceRun&)>& fn) {
  const auto emit = [&](uint64_t g, uint64_t local, uint64_t n) {
    const uint64_t b = std::max(g, lo), e = std::min(g + n, hi);
    if (b >= e) return true;
    return fn({b, local + (b - g), e - b});
  };
  if (slice.kind == TensorSlice::Kind::kFlat) {
    (void)emit(slice.begin, 0, slice.end - slice.begin);
    return;
  }
  const BoxRuns runs(shape, slice);
  // The first run that ends after lo: run starts ascend with the run index.
  uint64_t first = 0, last = runs.count;
  while (first < last) {
    const uint64_t mid = first + (last - first) / 2;
    if (runs.global(slice, mid) + runs.length <= lo) {
      first = mid + 1;
    } else {
      last = mid;
    }
  }
  for (uint64_t r = first; r < runs.count; ++r) {
    const uint64_t g = runs.global(slice, r);
    if (g >= hi) return;
    if (!emit(g, r * runs.length, runs.length)) return;
  }
}

SliceLocator::SliceLocator(const std::vector<int64_t>& shape, const TensorSlice& slice)
    : shape_(shape), strides_(strides_of(shape)), slice_(slice) {
  if (slice_elements(shape_, slice_) > 0) {
    if (slice_.kind == TensorSlice::Kind::kFlat) {
      first_ = slice_.begin;
      end_ = slice_.end;
    } else {
      const BoxRuns runs(shape_, slice_);
      first_ = runs.global(slice_, 0);
      end_ = runs.global(slice_, runs.count - 1) + runs.length;
    }
  }
  one_run_ = end_ - first_ == slice_elements(shape_, slice_);
}

std::optional<uint64_t> SliceLocator::local(uint64_t global) const {
  if (global < first_ || global >= end_) return std::nullopt;
  if (one_run_) return global - first_;
  uint64_t local = 0, rest = global;
  for (size_t e = 0; e < shape_.size(); ++e) {
    const auto at = static_cast<int64_t>(rest / strides_[e]);
    rest %= strides_[e];
    if (at < slice_.offsets[e] || at >= slice_.offsets[e] + slice_.sizes[e]) return std::nullopt;
    local = local * static_cast<uint64_t>(slice_.sizes[e]) +
            static_cast<uint64_t>(at - slice_.offsets[e]);
  }
  return local;
}

SliceIndexMap::SliceIndexMap(const std::vector<int64_t>& shape, const TensorSlice& slice)
    : shape_(shape),
      strides_(strides_of(shape)),
      slice_(slice),
      flat_(slice.kind == TensorSlice::Kind::kFlat) {}

uint64_t SliceIndexMap::global(uint64_t local) const {
  if (flat_) return slice_.begin + local;
  uint64_t g = 0;
  for (size_t e = shape_.size(); e-- > 0;) {
    const auto z = static_cast<uint64_t>(slice_.sizes[e]);
    g += (static_cast<uint64_t>(slice_.offsets[e]) + local % z) * strides_[e];
    local /= z;
  }
  return g;
}

void SliceIndexMap::for_each_run(uint64_t lo, uint64_t hi,
                                 const std::function<bool(const SliceRun&)>& fn) const {
  if (lo >= hi) return;
  // Local order is ascending global order, so local [lo, hi) is the slice's elements between
  // the globals of its ends.
  for_each_slice_run(shape_, slice_, global(lo), global(hi - 1) + 1, fn);
}

void for_each_shared_run(const std::vector<int64_t>& shape, const TensorSlice& a,
                         const TensorSlice& b, const std::function<bool(const SharedRun&)>& fn) {
  bool go_on = true;
  for_each_slice_run(shape, a, [&](const SliceRun& ra) {
    for_each_slice_run(shape, b, ra.global, ra.global + ra.count, [&](const SliceRun& rb) {
      go_on = fn({rb.global, ra.local + (rb.global - ra.global), rb.local, rb.count});
      return go_on;
    });
    return go_on;
  });
}

bool slices_meet(const std::vector<int64_t>& shape, const TensorSlice& a, const TensorSlice& b) {
  return first_shared(shape, a, b).has_value();
}

bool slice_holds_box(const std::vector<int64_t>& shape, const TensorSlice& outer,
                     const TensorSlice& inner) {
  if (inner.kind != TensorSlice::Kind::kBox || slice_elements(shape, inner) == 0) return false;
  if (outer.kind == TensorSlice::Kind::kFlat) {
    const SliceLocator at(shape, inner);
    return at.first() >= outer.begin && at.end() <= outer.end;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (inner.offsets[d] < outer.offsets[d] ||
        inner.offsets[d] + inner.sizes[d] > outer.offsets[d] + outer.sizes[d]) {
      return false;
    }
  }
  return true;
}

std::optional<EvenRuns> even_runs(const std::vector<int64_t>& shape, const TensorSlice& box) {
  if (box.kind != TensorSlice::Kind::kBox || shape.empty() || slice_elements(shape, box) == 0) {
    return std::nullopt;
  }
  const BoxRuns runs(shape, box);
  EvenRuns e{runs.global(box, 0), runs.length, runs.length};
  size_t varying = 0;
  for (size_t d = 0; d < runs.inner; ++d) {
    if (box.sizes[d] > 1) {
      ++varying;
      e.stride = runs.st[d];
    }
  }
  if (varying > 1) return std::nullopt;
  return e;
}

Status check_tiling(const std::string& tensor, const std::vector<RankSlice>& slices, bool whole) {
  if (slices.empty()) return invalid_argument("tensor '" + tensor + "': no rank holds a slice");
  const RankSlice& ref = slices.front();
  for (const auto& s : slices) {
    if (s.shape != ref.shape || s.dtype != ref.dtype) {
      return invalid_argument("tensor '" + tensor + "': rank " + std::to_string(ref.rank) +
                              " declares " + std::string(dtype_name(ref.dtype)) + " " +
                              shape_text(ref.shape) + " but rank " + std::to_string(s.rank) +
                              " declares " + std::string(dtype_name(s.dtype)) + " " +
                              shape_text(s.shape));
    }
    if (Status valid = check_slice(tensor, s.shape, s.slice); !valid.ok()) {
      return invalid_argument("rank " + std::to_string(s.rank) + ": " + valid.message());
    }
  }
  // A sweep in order of first element: a slice is compared only with those whose span (first
  // to last element) reaches it, so ranges that tile a tensor cost O(n log n), and only boxes
  // whose spans interleave (column blocks) are compared pairwise.
  const size_t n = slices.size();
  std::vector<uint64_t> first(n), end(n);
  for (size_t i = 0; i < n; ++i) {
    const SliceLocator at(ref.shape, slices[i].slice);
    first[i] = at.first();
    end[i] = at.end();
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return first[a] < first[b]; });
  uint64_t held = 0;
  std::vector<size_t> active;
  for (const size_t k : order) {
    held += slice_elements(ref.shape, slices[k].slice);
    if (first[k] == end[k]) continue;  // no elements
    std::erase_if(active, [&](size_t a) { return end[a] <= first[k]; });
    for (const size_t a : active) {
      const size_t i = std::min(a, k), j = std::max(a, k);
      const auto shared = first_shared(ref.shape, slices[i].slice, slices[j].slice);
      if (!shared) continue;
      return invalid_argument(
          "tensor '" + tensor + "': the slices of rank " + std::to_string(slices[i].rank) + " (" +
          describe_slice(slices[i].slice) + ") and rank " + std::to_string(slices[j].rank) + " (" +
          describe_slice(slices[j].slice) + ") overlap at element " +
          describe_element(ref.shape, *shared));
    }
    active.push_back(k);
  }
  const uint64_t total = elements_of(ref.shape);
  if (whole && held != total) {
    const uint64_t hole = first_hole(ref.shape, slices);
    return invalid_argument("tensor '" + tensor + "' " + shape_text(ref.shape) +
                            ": no rank holds element " + describe_element(ref.shape, hole) +
                            " (the slices hold " + std::to_string(held) + " of its " +
                            std::to_string(total) + " elements)");
  }
  return ok_status();
}

}  // namespace weightcast
