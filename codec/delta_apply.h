// Applying a sparse delta record in place, with these guarantees (docs/FORMATS.md describes the
// record):
//
//  * refuse: the destination's checksum must equal the record's base checksum, checked before
//    any byte is written (a double-applied or wrong-base delta never touches memory);
//  * verify: the checksum is updated incrementally as elements are written and must reach
//    the record's target checksum (a delta shifted by one element fails here);
//  * revert: on any failure after writing began (a target mismatch, a corrupt chunk) every
//    chunk already applied is undone, so the destination holds its old bytes again.
//
// The destination may be strided (a slice of a packed parameter) and may cover only part of
// the record's range (a shard); a part needs its own base and target checksums, which the
// manifest carries per shard layout (docs/FORMATS.md). Destination elements must not overlap.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_format.h"
#include "codec/tensor_ref.h"
#include "codec/tensor_slice.h"

namespace weightcast {

class ThreadPool;

// A destination that holds a slice of the tensor (tensor_slice.h): `shape` is the tensor's
// global shape and the destination's elements are the slice's, in its local order.
using SliceDestination = ShapedSlice;

// What undoing a successful apply needs besides the record: the old bits of the elements that
// raw chunks overwrote (the other chunks hold differences, which revert by subtraction). About
// the size of the record's raw chunks; empty when the record has none.
struct ApplyUndo {
  struct RawChunk {
    uint32_t chunk = 0;
    std::vector<uint32_t> positions;  // in the chunk, of the elements written
    std::vector<uint32_t> bits;       // their bits before the apply
  };
  std::vector<RawChunk> raw;  // ascending chunk order
};

struct ApplyOptions {
  // C() of the destination's current contents over the elements it covers, when the caller
  // tracks it (an engine knows it from its last verified apply). Otherwise apply computes it
  // with one pass over the destination.
  std::optional<uint64_t> current_checksum;
  // Global flat index of the destination's first element; default: the record's range_offset.
  std::optional<uint64_t> dest_first_element;
  // The destination holds this slice of the tensor instead of elements dest_first_element..
  // (then unused): the apply covers the slice's elements inside the record's range, and its
  // part checksums are C() over those. Host memory only (the CUDA codec refuses it by name).
  const SliceDestination* dest_slice = nullptr;
  // The record holds this slice's elements (EncodeOptions::slice: a box a tensor-parallel
  // rank owns): its positions are the slice's local indices, placed through the slice's
  // index map. The destination is then the whole tensor (dest_first_element 0) or dest_slice.
  // Host memory only.
  const ShapedSlice* record_slice = nullptr;
  // Base and target checksums of the destination's part, required when it covers less than
  // the record's range.
  std::optional<uint64_t> part_base_checksum;
  std::optional<uint64_t> part_target_checksum;
  // With dest_slice, for several records into one slice (a tensor several publisher ranks
  // wrote in ranges): no base or target check here; ApplyReport::checksum is current_checksum
  // (0 when unset, nothing is read) plus the change of C() this apply made, and the caller
  // compares the sum over the records with the slice's target, reverting all on a mismatch.
  bool caller_verifies = false;
  ThreadPool* pool = nullptr;
  // When set, a successful apply fills it so that revert_delta can undo it later (after
  // another tensor of the same version failed).
  ApplyUndo* undo = nullptr;
};

struct ApplyReport {
  uint64_t changed = 0;   // elements written
  uint64_t checksum = 0;  // C() of the destination's covered elements now (== target)
};

// What apply_delta checks before touching memory, shared by the CPU and CUDA paths: the
// destination's dtype and coverage, and the checksums its part must go from and to.
struct ApplyRequest {
  uint64_t first = 0;  // global index of the destination's first element
  uint64_t count = 0;  // elements the apply covers (of a slice: those in the record's range)
  bool whole = false;  // the destination covers the record's whole range
  uint64_t expected_base = 0;
  uint64_t expected_target = 0;
};
Result<ApplyRequest> check_apply_request(const DeltaRecordView& record, const TensorRef& dest,
                                         const ApplyOptions& options);
// The refusals apply_delta returns, worded once for both paths.
Status base_mismatch(const DeltaRecordHeader& header, uint64_t current, uint64_t expected);
Status target_mismatch(const DeltaRecordHeader& header, uint64_t checksum, uint64_t expected);

// Applies `record` into `dest`: host memory here, CUDA memory through cuda_codec::apply_delta
// (cuda_codec.h; the dispatch is device_dispatch.cc) with the same checks and guarantees. On error
// the destination is unchanged and the message names the tensor, the chunk or the checksums
// involved.
Result<ApplyReport> apply_delta(const DeltaRecordView& record, const TensorRef& dest,
                                const ApplyOptions& options = {});

// Undoes a successful apply_delta(record, dest, options with undo = &undo) on a destination
// nothing else wrote since: the destination holds its bytes from before that apply again.
// Options as for the apply (dest_first_element; pool). The caller verifies the result (the
// destination's checksum must be the record's base again); an error (a chunk that no longer
// decodes, a raw chunk without undo, a CUDA failure) leaves the destination undefined.
[[nodiscard]] Status revert_delta(const DeltaRecordView& record, const TensorRef& dest,
                                  const ApplyUndo& undo, const ApplyOptions& options = {});

}  // namespace weightcast
