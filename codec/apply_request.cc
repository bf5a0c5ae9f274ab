// What apply_delta checks before touching memory (delta_apply.h check_apply_request), shared
// by the host and CUDA paths, and the refusals both word the same.
#include <string>

#include "codec/base/hex.h"
#include "codec/delta_apply.h"
#include "codec/tensor_bytes.h"

namespace weightcast {
namespace {

// check_apply_request for a destination that holds a slice (ApplyOptions::dest_slice).
Result<ApplyRequest> check_slice_request(const DeltaRecordView& record, const TensorRef& dest,
                                         const ApplyOptions& o) {
  const DeltaRecordHeader& h = record.header;
  const SliceDestination& d = *o.dest_slice;
  const std::string who = "tensor '" + h.name + "'";
  if (dest.memory == MemoryKind::kCuda) {
    return invalid_argument(who + ": destination '" + dest.name +
                            "' is a slice in CUDA memory; slices are applied in host memory");
  }
  RETURN_IF_ERROR(check_slice(h.name, d.shape, d.slice));
  ASSIGN_OR_RETURN(const uint64_t tensor_elements, shape_numel(d.shape, who));
  if (tensor_elements != h.tensor_elements) {
    return invalid_argument(who + ": the slice is of a tensor of " +
                            std::to_string(tensor_elements) + " elements but the delta's has " +
                            std::to_string(h.tensor_elements));
  }
  const uint64_t held = slice_elements(d.shape, d.slice);
  if (dest.numel() != held) {
    return invalid_argument(who + ": destination '" + dest.name + "' has " +
                            std::to_string(dest.numel()) + " elements but slice " +
                            describe_slice(d.slice) + " holds " + std::to_string(held));
  }
  ApplyRequest req;
  req.first = h.range_offset;
  const auto count = [&](const SliceRun& r) {
    if (req.count == 0) req.first = r.global;
    req.count += r.count;
    return true;
  };
  if (o.record_slice != nullptr) {
    for_each_shared_run(d.shape, d.slice, o.record_slice->slice, [&](const SharedRun& r) {
      return count({r.global, r.local_a, r.count});
    });
  } else {
    for_each_slice_run(d.shape, d.slice, h.range_offset, h.range_offset + h.range_elements, count);
  }
  req.whole = req.count == h.range_elements;
  if (o.caller_verifies) return req;  // no expected checksums: the caller checks the sum
  if (!req.whole && (!o.part_base_checksum || !o.part_target_checksum)) {
    return invalid_argument(who + ": slice " + describe_slice(d.slice) + " holds " +
                            std::to_string(req.count) + " of the delta's " +
                            std::to_string(h.range_elements) +
                            " elements; give that part's base and target checksums");
  }
  req.expected_base = req.whole ? h.base_checksum : *o.part_base_checksum;
  req.expected_target = req.whole ? h.target_checksum : *o.part_target_checksum;
  return req;
}

// The record of a slice (ApplyOptions::record_slice) goes into a host destination holding the
// whole tensor from element 0, or a slice of it.
Status check_record_slice(const DeltaRecordHeader& h, const TensorRef& dest,
                          const ApplyOptions& o) {
  const std::string who = "tensor '" + h.name + "'";
  const ShapedSlice& r = *o.record_slice;
  if (dest.memory == MemoryKind::kCuda) {
    return invalid_argument(who + ": the record of slice " + describe_slice(r.slice) +
                            " is applied in host memory; destination '" + dest.name +
                            "' is CUDA memory");
  }
  RETURN_IF_ERROR(check_slice(h.name, r.shape, r.slice));
  ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(r.shape, who));
  if (numel != h.tensor_elements || h.range_offset != 0 ||
      slice_elements(r.shape, r.slice) != h.range_elements) {
    return invalid_argument(who + ": the record covers " + std::to_string(h.range_elements) +
                            " elements from " + std::to_string(h.range_offset) + " of " +
                            std::to_string(h.tensor_elements) + ", not slice " +
                            describe_slice(r.slice) + " of " + std::to_string(numel));
  }
  if (o.dest_slice == nullptr && (o.dest_first_element.value_or(0) != 0 || dest.numel() != numel)) {
    return invalid_argument(who + ": destination '" + dest.name + "' holds " +
                            std::to_string(dest.numel()) +
                            " elements; the record of a slice goes into the whole tensor of " +
                            std::to_string(numel) + " or into a slice destination");
  }
  return ok_status();
}

}  // namespace

Result<ApplyRequest> check_apply_request(const DeltaRecordView& record, const TensorRef& dest,
                                         const ApplyOptions& o) {
  const DeltaRecordHeader& h = record.header;
  const std::string who = "tensor '" + h.name + "'";
  RETURN_IF_ERROR(dest.validate());
  if (dest.dtype != h.dtype) {
    return invalid_argument(who + ": delta is " + std::string(dtype_name(h.dtype)) +
                            " but destination '" + dest.name + "' is " +
                            std::string(dtype_name(dest.dtype)));
  }
  const uint64_t range_end = h.range_offset + h.range_elements;
  if (o.record_slice != nullptr) RETURN_IF_ERROR(check_record_slice(h, dest, o));
  if (o.dest_slice != nullptr) return check_slice_request(record, dest, o);
  if (o.record_slice != nullptr) {
    ApplyRequest req;
    req.count = h.range_elements;
    req.whole = true;
    req.expected_base = h.base_checksum;
    req.expected_target = h.target_checksum;
    return req;
  }
  ApplyRequest req;
  req.first = o.dest_first_element.value_or(h.range_offset);
  req.count = dest.numel();
  const uint64_t first = req.first, count = req.count;
  if (first < h.range_offset || first > range_end || count > range_end - first) {
    return invalid_argument(who + ": destination covers elements [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") but the delta covers [" +
                            std::to_string(h.range_offset) + ", " + std::to_string(range_end) +
                            ")");
  }
  req.whole = first == h.range_offset && count == h.range_elements;
  if (!req.whole && (!o.part_base_checksum || !o.part_target_checksum)) {
    return invalid_argument(who + ": destination covers only [" + std::to_string(first) + ", " +
                            std::to_string(first + count) +
                            ") of the delta's range; give that part's base and target checksums");
  }
  req.expected_base = req.whole ? h.base_checksum : *o.part_base_checksum;
  req.expected_target = req.whole ? h.target_checksum : *o.part_target_checksum;
  return req;
}

Status base_mismatch(const DeltaRecordHeader& h, uint64_t current, uint64_t expected) {
  return failed_precondition(
      "tensor '" + h.name + "': destination checksum " + hex16(current) +
      " is not the delta's base checksum " + hex16(expected) + " (version " +
      std::to_string(h.base_version) +
      "): refusing to apply; the destination holds another version (already applied, or a "
      "different base)");
}

Status target_mismatch(const DeltaRecordHeader& h, uint64_t checksum, uint64_t expected) {
  return checksum_mismatch("tensor '" + h.name + "': after applying, the checksum is " +
                           hex16(checksum) + " but the delta's target checksum is " +
                           hex16(expected) + " (version " + std::to_string(h.target_version) +
                           "); the changes were reverted");
}

}  // namespace weightcast
