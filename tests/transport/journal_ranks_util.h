// Publisher ranks for the journal tests of rank fragments (transport/fs/rank_fragments.h):
// FSDP-like ranks own uneven flat ranges of the model laid end to end (crossing tensor
// boundaries), and write_fragment writes one rank's fragment of a version from the model's
// bytes before and after it.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/delta_encoder.h"
#include "codec/slice_checksum.h"
#include "tests/codec/test_data.h"
#include "tests/transport/journal_test_model.h"
#include "transport/fs/rank_anchor.h"
#include "transport/fs/rank_fragments.h"
#include "transport/fs/slice_checksums.h"

namespace weightcast::testing {

// One rank's piece of one tensor: elements [first, first + count).
struct Owned {
  size_t tensor;
  uint64_t first, count;
};

// The model's elements laid end to end, cut at uneven points: what each rank owns.
inline std::vector<std::vector<Owned>> fsdp_split(const JournalTestModel& m,
                                                  std::vector<double> cuts = {0.13, 0.41, 0.77}) {
  std::vector<uint64_t> numel(m.size());
  uint64_t total = 0;
  const auto tensors = m.tensors();
  for (size_t i = 0; i < m.size(); ++i) {
    numel[i] = m.bytes(i).size() / dtype_size(tensors[i].dtype);
    total += numel[i];
  }
  std::vector<uint64_t> at = {0};
  for (const double c : cuts) at.push_back(static_cast<uint64_t>(c * static_cast<double>(total)));
  at.push_back(total);
  std::vector<std::vector<Owned>> out(at.size() - 1);
  uint64_t base = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    for (size_t r = 0; r + 1 < at.size(); ++r) {
      const uint64_t lo = std::max(at[r], base), hi = std::min(at[r + 1], base + numel[i]);
      if (lo < hi) out[r].push_back({i, lo - base, hi - lo});
    }
    base += numel[i];
  }
  return out;
}

// Rank `rank`'s fragment of version `v`: its pieces of `before` -> `after`.
// With `declared`, also the rank's shares of the declared slices' checksums.
inline Status write_fragment(const std::string& root, uint64_t v, uint32_t rank,
                             const std::vector<Owned>& pieces, const JournalTestModel& before,
                             const JournalTestModel& after, const DeclaredSlices& declared = {}) {
  DeltaPartOptions parts;
  parts.part_bytes = 512;
  ASSIGN_OR_RETURN(auto w, RankFragmentWriter::open(root, v, rank, parts));
  const auto tensors = after.tensors();
  for (const Owned& o : pieces) {
    const PublishTensor& t = tensors[o.tensor];
    const size_t es = dtype_size(t.dtype);
    const std::span<const uint8_t> old_bytes(before.bytes(o.tensor));
    const std::span<const uint8_t> new_bytes(after.bytes(o.tensor));
    if (declared) {
      ASSIGN_OR_RETURN(const auto slices, declared(t.name, t.shape));
      const TensorRef own = TensorRef::contiguous(
          t.name, t.dtype, const_cast<uint8_t*>(new_bytes.data()) + o.first * es,
          static_cast<int64_t>(o.count));
      ASSIGN_OR_RETURN(
          const auto shares,
          partial_checksums(own, t.shape, TensorSlice::flat(o.first, o.first + o.count), slices));
      for (size_t k = 0; k < slices.size(); ++k) w->add_slice_share(t.name, slices[k], shares[k]);
    }
    if (es == 8) {
      RETURN_IF_ERROR(w->add_unchanged_range(
          t.name, t.dtype, t.shape, TensorSlice::flat(o.first, o.first + o.count),
          checksum_range(new_bytes.data() + o.first * es, es, o.count, o.first)));
      continue;
    }
    EncodeOptions e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.base_version = v - 1;
    e.target_version = v;
    e.range_offset = o.first;
    e.tensor_elements = new_bytes.size() / es;
    e.chunk_elements = 64;
    ASSIGN_OR_RETURN(auto d, encode_delta(old_bytes.subspan(o.first * es, o.count * es),
                                          new_bytes.subspan(o.first * es, o.count * es), e));
    RETURN_IF_ERROR(w->add_range(t.name, t.dtype, t.shape, d));
  }
  return w->finish();
}

// The model's specs, as the journal's writer and every rank plan the anchor from them.
inline std::vector<SafetensorsTensorSpec> specs_of(const JournalTestModel& m) {
  std::vector<SafetensorsTensorSpec> out;
  for (const auto& t : m.tensors()) out.push_back({t.name, t.dtype, t.shape});
  return out;
}

// Rank `rank`'s part of anchor `v`: its pieces of `model` written into the staged shard
// files, with its shares of the declared slices' checksums.
inline Status write_anchor_part(const std::string& root, uint64_t v, uint32_t rank,
                                const std::vector<Owned>& pieces, const JournalTestModel& model,
                                const AnchorWriteOptions& options,
                                const DeclaredSlices& declared = {}) {
  ASSIGN_OR_RETURN(auto w, RankAnchorWriter::open(root, v, rank, specs_of(model), options,
                                                  std::chrono::milliseconds(20000)));
  const auto tensors = model.tensors();
  for (const Owned& o : pieces) {
    const PublishTensor& t = tensors[o.tensor];
    const size_t es = dtype_size(t.dtype);
    const std::span<const uint8_t> bytes =
        std::span(model.bytes(o.tensor)).subspan(o.first * es, o.count * es);
    RETURN_IF_ERROR(w->write(t.name, o.first, bytes).status());
    if (!declared) continue;
    ASSIGN_OR_RETURN(const auto slices, declared(t.name, t.shape));
    const TensorRef own = TensorRef::contiguous(t.name, t.dtype, const_cast<uint8_t*>(bytes.data()),
                                                static_cast<int64_t>(o.count));
    ASSIGN_OR_RETURN(
        const auto shares,
        partial_checksums(own, t.shape, TensorSlice::flat(o.first, o.first + o.count), slices));
    for (size_t k = 0; k < slices.size(); ++k) w->add_slice_share(t.name, slices[k], shares[k]);
  }
  return w->finish();
}

// What a rank of a tensor-parallel trainer holds: a block of every tensor along its last
// dimension (a box for matrices, a flat range for vectors), except the experts, of which the
// first four are split so and the last four are cut in uneven flat ranges (a tensor mixing
// boxes and ranges). Each block is the rank's own memory, copied from the model at a version.
struct Block {
  size_t tensor;
  TensorSlice slice;
  std::vector<uint8_t> bytes;
};

inline std::vector<Block> tp_blocks(const JournalTestModel& model, uint32_t rank, uint32_t ranks) {
  std::vector<Block> out;
  const auto tensors = model.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<int64_t>& shape = tensors[i].shape;
    if (shape.empty()) {
      if (rank == 0) out.push_back({i, TensorSlice::whole(shape), {}});
      continue;
    }
    const auto last = static_cast<int64_t>(shape.size()) - 1;
    TensorSlice block = *TensorSlice::split(shape, last, ranks, rank);
    if (tensors[i].name == "layers.0.mlp.experts.weight") {
      block.sizes[0] = 4;
      const uint64_t half = 4 * 33 * 17;
      const auto cut = [&](uint32_t r) { return r == ranks ? half : r * half / ranks + 13 * r; };
      out.push_back({i, TensorSlice::flat(half + cut(rank), half + cut(rank + 1)), {}});
    }
    if (slice_elements(shape, block) > 0) out.push_back({i, block, {}});
  }
  return out;
}

// Engine layouts of the model: a layout splits some tensors along a dimension into `parts`;
// `declared` is what the publisher's layouts declare (src/control/layouts.h does it from the
// config), `gather` a slice's bytes out of a whole tensor's.
struct Layout {
  const char* name;
  int64_t parts;
  std::map<std::string, int64_t> dims;
};

inline const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"tp2 dim 0", 2, {{"layers.0.attn.q_proj.weight", 0}, {"layers.0.norm.weight", 0}}},
      {"tp2 dim 1", 2, {{"layers.0.attn.q_proj.weight", 1}, {"layers.0.mlp.experts.weight", 2}}},
      {"ep4", 4, {{"layers.0.mlp.experts.weight", 0}, {"quant.codes", 0}}},
  };
  return all;
}

template <typename AnyLayout>
TensorSlice slice_of(const AnyLayout& l, int64_t part, const std::string& name,
                     const std::vector<int64_t>& shape) {
  const auto it = l.dims.find(name);
  if (it == l.dims.end()) return TensorSlice::whole(shape);
  return *TensorSlice::split(shape, it->second, l.parts, part);
}

// The distinct slices `all` cut from a tensor (whole tensors left out): what a publisher's
// layouts declare.
template <typename LayoutList>
Result<std::vector<TensorSlice>> declared_by(const LayoutList& all, const std::string& name,
                                             const std::vector<int64_t>& shape) {
  std::vector<TensorSlice> out;
  for (const auto& l : all) {
    for (int64_t p = 0; p < l.parts; ++p) {
      TensorSlice s = slice_of(l, p, name, shape);
      if (s == TensorSlice::whole(shape)) continue;
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
  }
  return out;
}

inline Result<std::vector<TensorSlice>> declared(const std::string& name,
                                                 const std::vector<int64_t>& shape) {
  return declared_by(layouts(), name, shape);
}

inline std::vector<uint8_t> gather(const std::vector<uint8_t>& full,
                                   const std::vector<int64_t>& shape, const TensorSlice& s,
                                   size_t es) {
  return gather_slice(full, shape, s, es);
}

}  // namespace weightcast::testing
