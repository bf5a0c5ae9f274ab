// Internal to the anchor readers, not API (that is transport/fs/anchor_reader.h): the complete
// check of an anchor manifest (anchor_manifest_check.cc, which also defines
// validate_anchor_manifest) and the layout it learns, which the readers (anchor_reader.cc) trust
// for every offset they read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "transport/fs/anchor_reader.h"
#include "weightcast/journal.pb.h"

namespace weightcast::anchor_internal {

// What validation learns about a manifest, for the readers.
struct AnchorLayout {
  std::vector<size_t> shard_extents;        // shard s owns extents [shard_extents[s], [s + 1])
  std::vector<int64_t> extent_tensor;       // owning tensor, -1 for a shard's header
  std::vector<size_t> tensor_extent_begin;  // tensor i is covered by extents [begin, end)
  std::vector<size_t> tensor_extent_end;
  std::vector<DType> dtypes;
};

// Checks the manifest as validate_anchor_manifest documents and returns its layout.
Result<AnchorLayout> index_manifest(const proto::StepManifest& m,
                                    const AnchorManifestLimits& limits = {});

// kDataLoss "anchor manifest: <message>".
Status bad_manifest(const std::string& message);

// "tensor '<name>' (shard '<file>' offset <offset>)": tensor `i` as errors name it.
std::string tensor_where(const proto::StepManifest& m, size_t i);

}  // namespace weightcast::anchor_internal
