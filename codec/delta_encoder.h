// Encoding a sparse delta record from two versions of a tensor (or of one element range).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_chunk.h"
#include "codec/delta_format.h"
#include "codec/dtype.h"
#include "codec/tensor_ref.h"
#include "codec/tensor_slice.h"

namespace weightcast {

class ThreadPool;

struct EncodeOptions {
  std::string name;
  DType dtype = DType::kBF16;
  uint64_t base_version = 0;
  uint64_t target_version = 1;
  // The buffers hold elements [range_offset, range_offset + count) of a logical tensor of
  // tensor_elements elements (0: the range is the whole tensor).
  uint64_t range_offset = 0;
  uint64_t tensor_elements = 0;
  // The buffers hold this slice's elements in its local order (a box a tensor-parallel rank
  // owns, whose rows are not consecutive in the tensor): the record's range is the slice's
  // local indices [0, count) with range_offset 0 (tensor_elements: the shape's), and its
  // checksums are C() over the elements' global indices, the slice's share of the tensor's,
  // as a flat range's are. on_changes is called per run of consecutive global indices. Host
  // buffers only (the CUDA encoder refuses it).
  const ShapedSlice* slice = nullptr;
  uint32_t chunk_elements = kDefaultChunkElements;
  uint32_t allowed_modes = kAllowAllModes;
  // C() of the old range when the caller tracks it (a publisher knows it from the previous
  // version); otherwise the encoder computes it with one extra pass over `old`.
  std::optional<uint64_t> base_checksum;
  ThreadPool* pool = nullptr;  // chunks are encoded on it when given
  // When set, encode_delta and encode_delta_advancing call it for every chunk with changes, on
  // the thread that encoded the chunk (several at once with a pool), before a snapshot is
  // advanced: the chunk's first global index, its n changed positions (within the chunk,
  // ascending) and its old and new bytes. For what follows the changes in O(changed), as the
  // journal writer's slice checksums do (transport/fs/slice_checksums.h). Other encoders (the
  // CUDA codec, the hooked recorder) do not call it.
  std::function<void(uint64_t global_first, const uint32_t* positions, uint32_t n,
                     const uint8_t* old_chunk, const uint8_t* new_chunk)>
      on_changes;
};

struct EncodedDelta {
  DeltaRecordHeader header;
  std::vector<uint8_t> record;               // the record bytes, FORMATS.md
  std::array<uint32_t, 5> chunks_by_mode{};  // indexed by ChunkMode
};

// The record header an encode of `range_elements` elements with `options` starts from
// (checksums and change count still zero), validated; shared by the CPU and CUDA encoders.
Result<DeltaRecordHeader> delta_header_for(const EncodeOptions& options, uint64_t range_elements);

// old_bytes and new_bytes hold the same number of contiguous little-endian elements of
// options.dtype (1-, 2- or 4-byte types). Errors name the tensor.
Result<EncodedDelta> encode_delta(std::span<const uint8_t> old_bytes,
                                  std::span<const uint8_t> new_bytes, const EncodeOptions& options);

// encode_delta that also brings `snapshot` (the old bytes) to the new ones: each chunk with a
// change is copied over right after it was encoded and its base checksum taken, while both are
// in cache, so a publisher keeps one copy of the model instead of two (no separate pass).
// On an error the snapshot's contents are unspecified.
Result<EncodedDelta> encode_delta_advancing(std::span<uint8_t> snapshot,
                                            std::span<const uint8_t> new_bytes,
                                            const EncodeOptions& options);

// The delta between two versions held in views: contiguous host views go through encode_delta
// on their bytes, CUDA views through the CUDA encoder (cuda_codec.h); the bytes are the same.
// Errors name the tensor.
Result<EncodedDelta> encode_delta_views(const TensorRef& old_view, const TensorRef& new_view,
                                        const EncodeOptions& options);

}  // namespace weightcast
