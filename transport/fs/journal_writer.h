// The publisher side of the filesystem journal: every version becomes a step directory, an
// anchor (full safetensors snapshot) or a delta (sparse records against the version before),
// committed by the protocol of step_commit.h, after which retention runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_encoder.h"
#include "codec/dtype.h"
#include "codec/tensor_bytes.h"
#include "transport/fs/anchor_stream.h"
#include "transport/fs/anchor_writer.h"
#include "transport/fs/delta_step.h"
#include "transport/fs/retention.h"
#include "transport/fs/slice_checksums.h"
#include "transport/fs/step_commit.h"

namespace weightcast {

class ThreadPool;

struct JournalOptions {
  std::string root;
  // An anchor is written for the first version, on demand, and whenever this many versions
  // have passed since the last one (0: never on that account).
  uint64_t anchor_every = 10;
  RetentionPolicy retention;
  bool collect_garbage_after_publish = true;
  DeltaPartOptions delta;
  AnchorWriteOptions anchor;
  ThreadPool* pool = nullptr;                   // delta encoding runs on it when given
  std::function<void(const std::string&)> log;  // one line per published step
  std::function<void()> before_head;            // tests: between rename and HEAD
  // The slices engine layouts cut from each tensor: every step's manifest (and an anchor's
  // delta/) carries their checksums at its version (slice_checksums.h). Unset: none.
  DeclaredSlices declared_slices;
};

// A tensor of the model at one version: contiguous little-endian host bytes.
using PublishTensor = TensorBytesView;

struct PublishReport {
  uint64_t version = 0;
  bool anchor = false;
  std::string why_anchor;  // empty for a delta
  uint64_t changed_tensors = 0;
  uint64_t changed_elements = 0;
  uint64_t stored_bytes = 0;  // bytes of part or shard files written
  double seconds = 0;
  GcReport gc;
  // With JournalOptions::delta.keep_in_memory: the version's delta, when it has one (not for
  // a first version, a changed tensor set, or a delta no smaller than the model).
  std::optional<DeltaInMemory> delta;
  // publish_rank_fragments: each rank's live descriptors (path name -> descriptor), by rank,
  // from its fragment (rank_fragments.h ServeRankParts).
  std::vector<std::map<std::string, std::string>> rank_live_descriptors;
};

// Publishing with one copy of the model instead of two (what a publisher's snapshot needs):
// `snapshot[i]` holds previous[i]'s bytes (the same memory; every tensor, previous given or
// not) and is brought to current[i]'s as the step is written, a delta's changed chunks as they
// are encoded (encode_delta_advancing), whole tensors otherwise. `current_read` is called once
// current's bytes were read for the last time (the caller may change them from then on),
// before an anchor's files are written, which they then are from the snapshot. On an error
// the snapshot's contents are unspecified.
//
// `encoded[i]`, when set (hooked tensors, src/endpoint/publish_step.h), is tensor i's delta
// record, made by the caller from the writes that produced current[i]: snapshot[i] and
// previous[i]'s bytes are then unused, and current[i]'s bytes are needed only when the version
// is an anchor (anchor_reason tells beforehand); current_read then comes after the anchor's
// files were written. `anchor_only`: the records do not start from the head version (the
// caller's live tensors were not at it), so the version is an anchor without a delta.
struct SnapshotAdvance {
  std::span<const std::span<uint8_t>> snapshot;
  std::function<void()> current_read;
  std::span<EncodedDelta* const> encoded;
  bool anchor_only = false;
  // When set, an anchor's files are not written from the tensors: this puts them into `dir`
  // (a streamed anchor's finished files moved in, anchor_stream.h) and fills the manifest's
  // parts, extents, tensors and index_file as write_anchor does. current[i]'s bytes are then
  // not needed for the anchor.
  std::function<Status(const std::string& dir, proto::StepManifest* manifest)> anchor_files;
  // When set, called once every file of the version, its manifest included, is written and
  // fsynced, and before it is committed (renamed into place): an error publishes nothing (the
  // staged files are removed) and is publish()'s result. The hooked step's guard runs beside
  // the write and reports here.
  std::function<Status()> before_commit;
};

class JournalWriter {
 public:
  // Takes the root's writer lock (JournalLock: cleans a crashed writer's leftovers).
  static Result<std::unique_ptr<JournalWriter>> open(JournalOptions options);

  // The newest committed version (nullopt: an empty journal) and its manifest.
  const std::optional<proto::JournalHead>& head() const { return head_; }
  const proto::StepManifest* head_manifest() const { return head_ ? &head_manifest_ : nullptr; }

  // Publishes `current` as `version`, which must be newer than the head. A delta needs
  // `previous`: the tensors of the head version, same names in the same order; their
  // checksums are checked against the head manifest so a delta can only describe the version
  // readers hold. An anchor is written instead for the first version, on `force_anchor`,
  // every `anchor_every` versions, when versions are not consecutive, when the set of
  // tensors (names, dtypes, shapes) changed, when `previous` is empty, or when an 8-byte
  // tensor changed (the delta codec covers 1-, 2- and 4-byte elements). On error nothing is
  // published and the head is unchanged.
  Result<PublishReport> publish(uint64_t version, std::span<const PublishTensor> current,
                                std::span<const PublishTensor> previous, bool force_anchor = false,
                                const SnapshotAdvance* advance = nullptr);

  // Why `version` of tensors with the specs of `current` (names, dtypes, shapes; the bytes are
  // not read) would be an anchor whatever its bytes (first version, not consecutive, tensor
  // set changed, every anchor_every, force_anchor); empty when it can be a delta.
  std::string anchor_reason(uint64_t version, std::span<const PublishTensor> current,
                            bool force_anchor) const;

  // ---- Anchors streamed during the optimizer step (journal_writer_stream.cc) ----
  // In hooked mode an anchor version is written while the step computes it: stage_anchor
  // gives the directory, a StreamingAnchorWriter (anchor_stream.h, opened there with
  // anchor_options()) writes the shards and fills the manifest, publish_staged_anchor commits
  // it. An optional `<staged>/delta/` (the version's delta with its own MANIFEST, as publish()
  // writes for an anchor that could have been a delta) is the caller's and is committed as is.
  //
  // A fresh, empty staging directory for an anchor of `version` (kFailedPrecondition unless
  // `version` is newer than the head).
  Result<std::string> stage_anchor(uint64_t version);
  // Commits what a StreamingAnchorWriter finished in `staged_dir` (stage_anchor's for
  // `version`) as anchor `version`: completes `manifest` (format version, version, created,
  // writer, journal id, kind anchor, anchor_version = version, base_version 0), commits it with
  // commit_step as publish() commits an anchor, moves the head and runs retention. The report
  // has anchor = true, why_anchor = `why`, stored_bytes = the shards' bytes, changed_tensors =
  // every tensor, seconds = this call's. On an error (a version not newer than the head, a
  // manifest that is not a finished anchor, a failed commit) the staged directory is removed
  // and the head is unchanged; a `staged_dir` that is not that staging directory is refused
  // (kInvalidArgument) and left alone.
  Result<PublishReport> publish_staged_anchor(uint64_t version, const std::string& staged_dir,
                                              proto::StepManifest manifest, std::string why);
  // ---- Versions written by several publisher ranks (journal_writer_ranks.cc) ----
  // A delta (rank_fragments.h):
  // Waits up to `wait` for the fragments of ranks 0..ranks-1 of `version` (the head version +
  // 1), merges them into one step (merge_rank_fragments: every tensor of the head tiled by
  // the ranks' ranges, starting from the head's checksums) and commits it: HEAD moves once.
  // The fragments are removed whether or not the version was committed; on an error nothing
  // is published and the head is unchanged (a missing rank: kDeadlineExceeded naming it).
  Result<PublishReport> publish_rank_fragments(uint64_t version, uint32_t ranks,
                                               std::chrono::milliseconds wait);
  // An anchor (rank_anchor.h): stage_rank_anchor creates the shard files of the model `specs`
  // (every tensor, manifest order; planned with anchor_options()) in `version`'s staging
  // directory and puts READY in place for the ranks; publish_rank_anchor waits up to `wait`
  // for the fragments of ranks 0..ranks-1, checks that their ranges cover every tensor once,
  // reads the files back, checks every tensor's C() against the ranks' sums, adds the ranks'
  // slice checksum shares, and commits the anchor (publish_staged_anchor). On an error
  // nothing is published, the staged files and fragments are removed (kDeadlineExceeded
  // naming a missing rank, kFailedPrecondition the first element no rank wrote or one written
  // twice, kChecksumMismatch a tensor that does not read back as the ranks wrote it).
  Result<std::string> stage_rank_anchor(uint64_t version, std::vector<SafetensorsTensorSpec> specs);
  Result<PublishReport> publish_rank_anchor(uint64_t version, uint32_t ranks,
                                            std::chrono::milliseconds wait);
  // The shard and slice sizes (and pool) anchors of this journal are written with.
  const AnchorWriteOptions& anchor_options() const { return options_.anchor; }

 private:
  JournalWriter(JournalOptions options, JournalLock lock);
  // Completes `manifest` (format, created, writer, journal id), commits `staged_dir` with it,
  // moves the head and runs retention; the staged directory is removed on an error. `how` goes
  // into the log line ("published version V <how>: ...").
  Result<PublishReport> commit_staged(const std::string& staged_dir, proto::StepManifest manifest,
                                      PublishReport report, double t0, const std::string& how);
  Result<std::string> delta_refusal(uint64_t version, std::span<const PublishTensor> current,
                                    std::span<const PublishTensor> previous,
                                    const SnapshotAdvance* advance) const;
  Status write_anchor_step(
      const std::string& staged, std::span<const PublishTensor> current,
      proto::StepManifest* manifest, PublishReport* report,
      const std::function<Status(const std::string&, proto::StepManifest*)>* files = nullptr);
  Status write_delta_step(const std::string& staged, std::span<const PublishTensor> current,
                          std::span<const PublishTensor> previous, proto::StepManifest* manifest,
                          PublishReport* report, std::string* needs_anchor,
                          const SnapshotAdvance* advance);

  JournalOptions options_;
  JournalLayout layout_;
  JournalLock lock_;
  std::optional<proto::JournalHead> head_;
  proto::StepManifest head_manifest_;
  // The anchor the publisher ranks are writing (stage_rank_anchor), and its version.
  std::unique_ptr<StreamingAnchorWriter> rank_anchor_;
  uint64_t rank_anchor_version_ = 0;
  // The delta being written: its tensors' slice checksums followed change by change.
  std::vector<std::unique_ptr<SliceChangeSums>> slice_changes_;
};

}  // namespace weightcast
