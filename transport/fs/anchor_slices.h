// Loading one slice of an anchor tensor into an engine rank that holds only that slice
// (ReaderDestination::slice, catch_up_reader.h): only the slice's bytes are read.
#pragma once

#include <cstdint>
#include <string>

#include "codec/base/status.h"
#include "codec/delta_apply.h"
#include "codec/tensor_ref.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// Reads slice `where.slice` of anchor tensor `index` (a manifest validate_anchor_manifest
// accepted) into `view`, which holds the slice's elements in local order (host or CUDA
// memory, any strides): each run of the slice is read with pread from the shard file and C()
// of the slice is checked against `expected` (the manifest's slice checksum). A contiguous
// host view is read into directly (on an error it holds unspecified bytes, as a whole tensor
// read in place does); any other view through a host buffer of the slice's size, written into
// it only once the checksum matched. The extents' XXH3s cover whole extents and are not
// checked here: the slice checksum is. Errors name the
// shard file and the tensor; *bytes_written (when given) counts the bytes written.
[[nodiscard]] Status read_anchor_slice(const std::string& dir, const proto::StepManifest& manifest,
                                       size_t index, const SliceDestination& where,
                                       const TensorRef& view, uint64_t expected,
                                       uint64_t* bytes_written = nullptr);

}  // namespace weightcast
