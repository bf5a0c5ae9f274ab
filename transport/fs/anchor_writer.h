// Writing an anchor of the filesystem journal (docs/FORMATS.md, transport/fs/journal_layout.h): a
// full snapshot of every tensor as valid safetensors shards plus a Hugging Face
// `model.safetensors.index.json`, so that any HF loader can read a step directory as it lies.
//
// The whole layout (shard files, headers, every tensor's offset) is fixed before the first
// byte is written (plan_anchor, anchor_plan.h, shared with StreamingAnchorWriter of
// anchor_stream.h, so both write the same files); a pool of threads then pwrites slices at their
// offsets, spread round-robin over the files so several files are written at once (one file at a
// time is much slower on shared filesystems). Integrity data is computed while each slice is in
// cache: an XXH3-64 per slice (an Extent of the manifest) and each tensor's checksum C()
// (docs/FORMATS.md).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/dtype.h"
#include "codec/tensor_bytes.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

class ThreadPool;

// One tensor to snapshot: contiguous row-major host bytes, numel * dtype_size of them.
using AnchorTensor = TensorBytesView;

struct AnchorWriteOptions {
  // Target shard file size (tensor bytes per file). Tensors are packed greedily in the given
  // order; a tensor larger than this gets a file of its own.
  uint64_t shard_bytes = uint64_t{1} << 30;
  // The unit of one Extent (one XXH3-64 and one work item); tensors are split into slices of
  // at most this, rounded down to a multiple of 8 bytes so no slice splits an element.
  uint64_t slice_bytes = uint64_t{64} << 20;
  // Writer threads when `pool` is null (0: one per hardware thread).
  size_t threads = 4;
  // A pool to write on instead of one owned by the call. Must not be inside its own
  // parallel_for (the pool runs one loop at a time).
  ThreadPool* pool = nullptr;
  // Optional, called after every slice with the bytes written so far. Calls are serialised
  // (never concurrent) but come from writer threads.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;
  // Test hook (ENOSPC simulation): called before every pwrite with the file's path, the
  // absolute offset and the byte count; an error is returned as that write's error.
  std::function<Status(const std::string& file, uint64_t offset, uint64_t bytes)> before_write;
  // When not empty: a JSON object written as config.json beside the index (an FP8 group's
  // quantization_config, which FP8 loaders read there; src/endpoint/publisher_fp8.cc).
  std::string config_json;
};

// The name of an anchor's index file, as Hugging Face spells it.
inline constexpr const char* kAnchorIndexFile = "model.safetensors.index.json";
// AnchorWriteOptions::config_json's file.
inline constexpr const char* kAnchorConfigFile = "config.json";

// "model-00001-of-00003.safetensors": shard `index` (0-based) of `count`.
std::string anchor_shard_name(size_t index, size_t count);

// Writes the anchor of `tensors` into `dir` (created if missing; existing shard files are
// replaced): shard files, each fsynced, and the index json (written and fsynced). The
// directory itself is not fsynced: the caller renames it into place and fsyncs then.
//
// Fills into `manifest` (replacing these fields, leaving the others to the caller):
// kind = STEP_ANCHOR; parts, one per shard (file, bytes = raw_bytes = file size, xxh3 = 0);
// extents, covering every byte of every shard in order (the header as one extent, then the
// slices; an extent never spans two tensors); tensors, one per input in input order (name,
// dtype, shape, checksum C(), part = shard index, offset = absolute file offset, bytes);
// index_file = kAnchorIndexFile. Every shard carries the metadata {"format": "pt"} that
// transformers' loader requires.
//
// Errors: kInvalidArgument naming the tensor for a bad spec (empty or duplicate name, negative
// dimension; from plan_safetensors) or a byte count that disagrees with dtype and shape,
// before anything is written; a write error names the file and offset. After an error the
// directory holds partial files and `manifest` unspecified fields; the caller removes it.
Status write_anchor(const std::string& dir, std::span<const AnchorTensor> tensors,
                    const AnchorWriteOptions& options, proto::StepManifest* manifest);

}  // namespace weightcast
