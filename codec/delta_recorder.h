// Recording one tensor's sparse delta from the writes that make its new version, instead of
// diffing two full copies: each write passes the old and new bytes of a run of elements, and
// every delta chunk is encoded (encode_chunk, the encoder's own) as soon as all of its elements
// were written. The record finish() assembles is byte for byte the one encode_delta makes from
// the same two versions with the same options.
//
// Memory: the encoded chunks (the delta) plus, for each chunk written part way, its old and
// new bytes until the rest of it arrives (2 x chunk_elements x element size); with a
// DeferredEncoder, the captures waiting in its slots (bounded by the encoder).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "codec/base/status.h"
#include "codec/deferred_encoder.h"
#include "codec/delta_chunk.h"
#include "codec/delta_encoder.h"

namespace weightcast {

class DeltaRecorder {
 public:
  // `options` as for encode_delta of a whole tensor of `elements` elements (range_offset 0);
  // options.base_checksum is required: C() of the old version, which the writes cannot give.
  static Result<std::unique_ptr<DeltaRecorder>> create(const EncodeOptions& options,
                                                       uint64_t elements);

  // Elements [first, first + count) go from `old_bytes` to `new_bytes` (contiguous host bytes,
  // count elements each). Safe to call from several threads for disjoint elements. An element
  // recorded twice, or a range past the end, is kInvalidArgument naming the tensor.
  [[nodiscard]] Status record(uint64_t first, uint64_t count, const uint8_t* old_bytes,
                              const uint8_t* new_bytes);

  // record() fused with the write it precedes: `live` holds elements [first, first + count) of
  // the tensor (contiguous host bytes, their old values) and receives `new_bytes` over them.
  // Whole chunks are compared and copied in one pass; nothing is written where the record is
  // refused. Without `encoder` each whole chunk is encoded in the call (scan_and_copy_changes).
  // With one, the pass only captures the change (capture_and_copy_changes, into an encoder
  // slot) and the chunk is encoded on the encoder's worker from the capture (a chunk dense
  // enough to be stored raw from the new values `live` then holds): `live` must stay valid and
  // unwritten until encoder->drain(), which must return before finish(), target_checksum() or
  // the recorder's destruction. The records are the same either way.
  [[nodiscard]] Status record_write(uint64_t first, uint64_t count, uint8_t* live,
                                    const uint8_t* new_bytes, DeferredEncoder* encoder = nullptr);

  const std::string& name() const { return options_.name; }
  uint64_t elements() const { return elements_; }
  uint64_t written() const;
  uint64_t changed() const;
  uint64_t pending_chunks() const;
  // C() of the new version as far as the writes so far tell: the base checksum plus every
  // encoded chunk's change (the final value once every element was written).
  uint64_t target_checksum() const;

  // Every element written: the record (header.changed == 0 when nothing changed). Otherwise
  // kFailedPrecondition naming the tensor and the first elements never written.
  Result<EncodedDelta> finish();

 private:
  DeltaRecorder(EncodeOptions options, DeltaRecordHeader header, uint64_t elements);

  struct Pending {
    std::vector<uint8_t> old_bytes, new_bytes;
    std::map<uint32_t, uint32_t> runs;  // written [start, end) within the chunk, disjoint
    uint32_t written = 0;
  };
  void encode(uint32_t chunk, const uint8_t* old_bytes, const uint8_t* new_bytes);
  void encode_writing(uint32_t chunk, uint8_t* live, const uint8_t* new_bytes);
  void encode_captured(uint32_t chunk, const uint8_t* live, const uint8_t* capture);
  void encoded(uint32_t chunk);
  Status check_range(uint64_t first, uint64_t count) const;
  // Calls fn for each run of [first, first + count) inside one chunk, in order; `done` is the
  // run's distance from `first`. The range is checked first; fn's first error stops the walk.
  Status for_each_run(uint64_t first, uint64_t count,
                      const std::function<Status(uint32_t chunk, uint32_t start, uint32_t length,
                                                 uint64_t done)>& fn) const;
  Status written_twice(uint32_t chunk, uint32_t start, uint32_t length) const;
  Status record_part(uint32_t chunk, uint32_t start, uint32_t length, const uint8_t* old_bytes,
                     const uint8_t* new_bytes);

  EncodeOptions options_;
  DeltaRecordHeader header_;
  uint64_t elements_ = 0;
  size_t elem_size_ = 0;
  mutable std::mutex mu_;
  std::vector<EncodedChunk> chunks_;
  std::vector<uint8_t> state_;  // per chunk: 0 unwritten, 1 pending, 2 claimed, 3 encoded
  std::map<uint32_t, Pending> pending_;
  uint64_t written_ = 0;
  uint64_t changed_ = 0;
  uint64_t checksum_change_ = 0;
};

}  // namespace weightcast
