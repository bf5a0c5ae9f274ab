// Reading and verifying an anchor of the filesystem journal (transport/fs/anchor_writer.h
// writes them). The manifest is outside input: it is validated completely before any file is
// opened, and every byte read is checked against its extent's XXH3-64 and then against the
// tensor's checksum C(), so a corrupt, truncated or substituted shard is refused with an error
// naming the file and offset instead of reaching an engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "codec/base/status.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

class ThreadPool;

// What a manifest may hold before it is refused (kDataLoss: the manifest is the culprit).
struct AnchorManifestLimits {
  size_t max_tensors = 10'000'000;
  size_t max_parts = 1'000'000;
  size_t max_extents = 100'000'000;
  size_t max_rank = 64;
  size_t max_name_bytes = 4096;
};

// Checks an anchor manifest before anything is read: kind STEP_ANCHOR; counts within
// `limits`; parts non-empty with plain, distinct file names (is_safe_part_file_name: no '/', not
// "." or "..", printable ASCII),
// uncompressed (raw_bytes == bytes); extents in order, each non-empty and inside its shard,
// covering every shard exactly once from offset 0; tensors with non-empty distinct names,
// known dtypes, shapes whose numel * element size equals bytes, part indices in range, ranges
// inside one shard's data section, not overlapping, each exactly covered by the extents after
// the shard's first (the header) with every extent boundary on an element boundary, and no
// extent after the header left without a tensor. Errors: kDataLoss naming the field.
Status validate_anchor_manifest(const proto::StepManifest& manifest,
                                const AnchorManifestLimits& limits = {});

// Reads tensor `index` of the manifest into `dest` (dest.size() must equal its bytes) with
// pread, verifying the XXH3-64 of every extent it covers and then the tensor's checksum.
// Validates the whole manifest first (O(manifest)); use read_anchor for many tensors.
// Errors: kNotFound naming the path of a missing shard; kDataLoss naming file and offset for a
// wrong XXH3 or a shard whose size differs from the manifest (truncated); kChecksumMismatch
// naming the tensor when C() differs; kInvalidArgument for a wrong dest size or index. On an
// error `dest` holds unspecified bytes.
Status read_anchor_tensor(const std::string& dir, const proto::StepManifest& manifest, size_t index,
                          std::span<uint8_t> dest);

// Reads every tensor: dests[i] receives manifest.tensors(i). Extents are read in parallel on
// `pool` (sequentially when null). Errors as read_anchor_tensor; the first error is returned.
Status read_anchor(const std::string& dir, const proto::StepManifest& manifest,
                   std::span<const std::span<uint8_t>> dests, ThreadPool* pool = nullptr);

// Reads the tensors `indices` (distinct) into dests[k] (manifest.tensors(indices[k])'s bytes),
// as read_anchor does for all of them.
Status read_anchor_tensors(const std::string& dir, const proto::StepManifest& manifest,
                           std::span<const size_t> indices,
                           std::span<const std::span<uint8_t>> dests, ThreadPool* pool = nullptr);

// Re-reads every extent of every shard and checks: the manifest (validate_anchor_manifest),
// file sizes, XXH3s, that each shard's safetensors header parses and agrees with the manifest
// (names, dtypes, shapes, offsets), every tensor's checksum, and that the index json names
// every tensor with its shard file and nothing else.
Status verify_anchor(const std::string& dir, const proto::StepManifest& manifest,
                     ThreadPool* pool = nullptr);

}  // namespace weightcast
