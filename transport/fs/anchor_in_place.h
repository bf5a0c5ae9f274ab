// Loading an anchor straight into the memory of the tensors that receive it (the journal
// reader's destinations, transport/fs/catch_up_reader.h), with no model-sized copy.
//
// A contiguous host view is read by pread into its own memory: each extent's XXH3-64 and the
// tensor's checksum C() are verified over the bytes as they land, so on an error the view
// holds unspecified bytes (the caller then holds no version; see CatchUpReader). Every other
// view (strided, or in CUDA memory) is read into host staging first, at most `staging_bytes`
// for a batch of tensors at a time (a larger tensor gets a buffer of its own size), verified
// there, and only then written into the view with scatter_tensor (transport/tensor_staging.h),
// which goes through pinned buffers for CUDA memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

class ThreadPool;

inline constexpr uint64_t kAnchorStagingBytes = uint64_t{64} << 20;

// views[i] receives manifest.tensors(i); each view must have that tensor's dtype and element
// count (the caller checks names and shapes). A view without data is skipped (a destination
// that holds a slice: anchor_slices.h reads it). Errors as read_anchor (anchor_reader.h), or
// scatter_tensor's naming the tensor. *bytes_written (when given) counts the bytes written
// into the views.
[[nodiscard]] Status read_anchor_in_place(const std::string& dir,
                                          const proto::StepManifest& manifest,
                                          std::span<const TensorRef> views, ThreadPool* pool,
                                          uint64_t staging_bytes = kAnchorStagingBytes,
                                          uint64_t* bytes_written = nullptr);

}  // namespace weightcast
