// An anchor written while its bytes arrive (transport/fs/anchor_writer.h): in hooked mode the
// optimizer step hands over each parameter's new values as they are computed, and they are written
// with pwrite straight at the offsets the anchor's layout fixes, with no host copy of the model.
//
// The layout is plan_anchor's (anchor_plan.h), the one write_anchor uses: for the same tensors
// and options the files, the index json and the manifest are byte for byte those of
// write_anchor, whatever order the bytes arrive in. open() creates the shard files in the
// caller's directory (a journal staging directory: JournalWriter::stage_anchor), writes their
// headers and sizes them; write() then puts any element range of any tensor in place, from
// any thread; finish() refuses unless every byte of every tensor was written, fsyncs the
// files, reads them back in bounded pieces to compute each extent's XXH3-64 and each tensor's
// checksum C() (docs/FORMATS.md), writes the index json and fills the manifest.
//
// Errors are sticky: after a refused or failed write (a double write, a write past the end, an
// I/O error) every later write and finish() return that first error, and the directory holds
// partial files the caller removes (publish_staged_anchor does on its own errors).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/formats/safetensors_format.h"
#include "transport/fs/anchor_plan.h"
#include "transport/fs/anchor_writer.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

class ThreadPool;

class StreamingAnchorWriter {
 public:
  // Plans the anchor of `tensors` (manifest order) as write_anchor would with `options`,
  // creates `dir` if missing, creates (truncating) every shard file, pwrites its header and
  // ftruncates it to its final size, so bytes can be written at any offset in any order.
  // Errors: kInvalidArgument naming the tensor for a bad spec (from plan_anchor, before any
  // file is created); an I/O error naming the file (the before_write hook applies to the
  // header writes too).
  static Result<std::unique_ptr<StreamingAnchorWriter>> open(
      const std::string& dir, std::vector<SafetensorsTensorSpec> tensors,
      AnchorWriteOptions options);
  ~StreamingAnchorWriter();
  StreamingAnchorWriter(const StreamingAnchorWriter&) = delete;
  StreamingAnchorWriter& operator=(const StreamingAnchorWriter&) = delete;

  const std::string& dir() const { return dir_; }
  const AnchorPlan& plan() const { return plan_; }
  size_t tensor_count() const { return specs_.size(); }
  const SafetensorsTensorSpec& tensor(size_t i) const { return specs_[i]; }

  // Writes `bytes` (whole elements of tensor `tensor`, contiguous row-major, little-endian) as
  // the elements from `first_element` on, with one pwrite at their precomputed offset (the
  // before_write hook is called first with the file, the absolute offset and the length).
  // Thread-safe: any threads may write disjoint ranges concurrently. Refused, naming the
  // tensor, the elements and the file offset: an unknown tensor or a byte count that is not
  // whole elements (kInvalidArgument), a range past the tensor's end (kOutOfRange), a range
  // overlapping bytes already written, i.e. a double write (kFailedPrecondition). I/O errors
  // (and the hook's) name the file, the tensor, the elements and the offset. An empty `bytes`
  // at first_element <= numel writes nothing. The progress callback (called after each write
  // with the file bytes done, headers included, and the anchor's file bytes; serialised) must
  // not call back into the writer.
  Status write(size_t tensor, uint64_t first_element, std::span<const uint8_t> bytes);

  // Writes the whole tensor (all its bytes, which must be exactly numel * dtype size) in the
  // plan's slices, spread over the options' pool (or the writer's own pool of options.threads)
  // when there are several. Not to be called from inside that pool's parallel_for (one loop
  // runs at a time per pool); concurrent callers are serialised by the pool.
  Status write_tensor(size_t tensor, std::span<const uint8_t> all_bytes);

  // Records elements [first_element, first_element + count) of `tensor` as written by another
  // process into the files (a publisher rank: rank_anchor.h), with the refusals of write()
  // (a range past the end, a double write); finish() reads them back as any others.
  Status mark_written(size_t tensor, uint64_t first_element, uint64_t count);

  // Tensor bytes written so far (headers not counted).
  uint64_t bytes_written() const;

  // Completes the anchor. Refuses (kFailedPrecondition naming the tensor, its first missing
  // element and that element's file offset) unless every byte of every tensor was written;
  // returns the sticky error if a write failed. Then fsyncs and closes the files, reads them
  // back on the pool in pieces of at most 4 MiB per thread (the extents' XXH3-64 and the
  // tensors' C(), since bytes arrived in any order), writes and fsyncs the index json and
  // fills `manifest` exactly as write_anchor does (anchor_writer.h). The directory itself is not
  // fsynced (commit_step does). Call once; writes after it are refused.
  Status finish(proto::StepManifest* manifest);

  // C() of every tensor (input order) as read back by a successful finish(); empty before.
  // The caller compares them with the checksums it expects of the values it handed over.
  const std::vector<uint64_t>& checksums() const { return checksums_; }

 private:
  StreamingAnchorWriter() = default;
  // Records [begin, end) of tensor `tensor`'s bytes as written; refuses an overlap.
  Status reserve(size_t tensor, uint64_t begin, uint64_t end);
  // Makes `s` the sticky error (when it is the first) and returns the sticky error.
  Status fail(Status s);
  Status read_back(std::vector<uint64_t>* hashes);
  ThreadPool* pool();

  std::string dir_;
  std::vector<SafetensorsTensorSpec> specs_;
  AnchorWriteOptions options_;
  AnchorPlan plan_;
  std::vector<int> fds_;  // per shard; -1 once closed
  std::unique_ptr<ThreadPool> owned_pool_;

  mutable std::mutex mutex_;  // guards everything below but failed_
  std::atomic<bool> failed_{false};
  Status first_error_;
  // Per tensor, the byte ranges written, merged: begin -> end.
  std::vector<std::map<uint64_t, uint64_t>> written_;
  uint64_t bytes_written_ = 0;
  uint64_t progress_done_ = 0;  // file bytes (headers included) for the progress callback
  bool finished_ = false;
  std::vector<uint64_t> checksums_;
};

}  // namespace weightcast
