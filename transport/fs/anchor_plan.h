// The layout of an anchor (transport/fs/anchor_writer.h), fixed before any byte is written: which
// shard file every tensor goes to, each shard's safetensors header, every tensor's absolute offset,
// and the extents (header, then slices of at most slice_bytes) the manifest lists. One planning
// function for both writers: write_anchor (anchor_writer.h, bytes in hand) and
// StreamingAnchorWriter (anchor_stream.h, bytes arriving during the optimizer step), so the
// two produce the same files and the same manifest for the same tensors.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/file_io.h"  // pwrite_all
#include "codec/base/status.h"
#include "codec/formats/safetensors_format.h"
#include "transport/fs/anchor_writer.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

struct AnchorShardPlan {
  std::string file;            // anchor_shard_name(index, count)
  std::string path;            // dir / file
  std::vector<size_t> inputs;  // indices of the tensors it holds, in input order
  SafetensorsLayout layout;    // header bytes, data order, file size
};

// One extent of the manifest: the header of a shard, or a slice of one tensor.
struct AnchorExtentPlan {
  size_t shard = 0;
  uint64_t offset = 0;         // absolute file offset
  uint64_t bytes = 0;          // length
  int64_t tensor = -1;         // input index; -1 for the header
  uint64_t tensor_offset = 0;  // byte offset of the slice within the tensor's bytes
  uint64_t first_element = 0;  // global index of the slice's first element
};

struct AnchorTensorPlan {
  uint32_t shard = 0;
  uint64_t offset = 0;  // absolute offset of the first byte in the shard file
  uint64_t bytes = 0;   // numel * dtype size
};

struct AnchorPlan {
  std::vector<AnchorShardPlan> shards;
  std::vector<AnchorExtentPlan> extents;  // ordered by shard and offset, headers included
  std::vector<AnchorTensorPlan> tensors;  // one per input, in input order
  uint64_t file_bytes = 0;                // sum of the shards' file sizes
};

// Plans the anchor of `specs` (in manifest order) under `dir`: tensors packed greedily in
// order into shards of about options.shard_bytes tensor bytes (a larger tensor gets a file of
// its own), each shard's header by plan_safetensors with the metadata {"format": "pt"}, and
// extents of at most options.slice_bytes rounded down to a multiple of 8 (at least 8).
// Errors: kInvalidArgument naming the tensor for what plan_safetensors rejects over the whole
// model (duplicates across shards included), prefixed with `context`.
Result<AnchorPlan> plan_anchor(const std::string& dir, std::span<const SafetensorsTensorSpec> specs,
                               const AnchorWriteOptions& options, const std::string& context);

// The order extents are handed to writer threads in: the k-th extent of every file before the
// (k+1)-th of any, so that threads taking consecutive items work on different files.
std::vector<size_t> anchor_round_robin_order(const AnchorPlan& plan);

// Fills the anchor's fields of `manifest` as anchor_writer.h documents for write_anchor
// (kind, parts, extents with `extent_xxh3` in plan order, tensors with `checksums`,
// index_file), replacing those fields and leaving the others.
void fill_anchor_manifest(const AnchorPlan& plan, std::span<const SafetensorsTensorSpec> specs,
                          std::span<const uint64_t> extent_xxh3,
                          std::span<const uint64_t> checksums, proto::StepManifest* manifest);

// io_error "<what> '<path>' at offset <offset>: <strerror(errno)>".
Status anchor_errno_error(const std::string& what, const std::string& path, uint64_t offset);

// Writes and fsyncs `dir`/model.safetensors.index.json (total_size and weight_map).
Status write_anchor_index_json(const std::string& dir, std::span<const SafetensorsTensorSpec> specs,
                               const AnchorPlan& plan);
// options.config_json into `dir`/config.json, synced; nothing when it is empty.
Status write_anchor_config_json(const std::string& dir, const AnchorWriteOptions& options);

}  // namespace weightcast
