// The subscriber side of the filesystem journal: brings registered destination tensors from
// the version they hold (or from nothing) to the head, as "load anchor A, then apply deltas
// A+1..V", verifying every part's XXH3 and every tensor's checksum on the way, and follows new
// versions as they are committed.
//
// The destinations are written in place (the engine's own memory when they are its tensors):
// a delta's records are applied straight into them (codec/delta_apply.h), an anchor is read
// into them (transport/fs/anchor_in_place.h). Only record bytes are staged.
//
// Guarantees: a destination set is only ever reported as holding version v (held()) when
// every tensor's checksum equals v's manifest. A delta version is all or nothing: everything
// is read and checked (part XXH3s, manifest, record headers) before the first write, and when
// a tensor fails after writes began (a target mismatch, a chunk that does not decode, a CUDA
// error) every tensor already applied in that version is reverted and verified, so held()
// stays the base version. Only when a revert itself fails, or an anchor fails while loading,
// is held() left empty (the contents are then undefined); the reader then recovers by loading
// an anchor, and a bad anchor (corrupt, truncated, missing) makes it fall back to the
// previous one.
//
// The held version is that of one journal (held_journal_id(), HEAD's journal_id when it was
// reached). When HEAD names another journal (the root was wiped and recreated) or a version
// older than the held one (HEAD rebuilt by repair-head), the held version is not this
// journal's: catch_up drops it and starts from an anchor.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/delta_apply.h"
#include "codec/dtype.h"
#include "codec/tensor_ref.h"
#include "transport/fs/journal_layout.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

class ThreadPool;

// Where one tensor of the model lives in the reader's process: contiguous host `bytes`, or,
// when view.data is set, `view` (host or CUDA memory, any strides: a packed parameter's
// slice); the view's dtype and shape are then the destination's.
//
// With `slice`, the destination holds only that slice of the tensor (an engine rank of a
// layout, src/control/layouts.h): `shape` is the tensor's global shape (given, also with a
// view), and `bytes` or `view` hold the slice's elements in its local order. The reader then
// applies only the slice's elements, reads only the slice's bytes of an anchor, and verifies
// against the manifests' slice checksums (journal.proto SliceChecksum; a step without one
// for the slice is refused). checksum(i) is then the slice's C().
struct ReaderDestination {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  std::span<uint8_t> bytes;
  TensorRef view{};
  std::optional<TensorSlice> slice{};
};

struct CatchUpOptions {
  ThreadPool* pool = nullptr;
  // When set, a lease under this holder name protects the steps being replayed from GC.
  std::string lease_holder;
  int64_t lease_ttl_ms = 10 * 60 * 1000;
  std::function<void(const std::string&)> log;  // a line per step loaded and per fallback
  // Read as if HEAD were this instead of the root's HEAD file (repair-head replays a
  // candidate version before it writes HEAD).
  std::optional<proto::JournalHead> assume_head{};
  // The window in which the destinations are written (on the calling thread): before_write(v)
  // right before the first byte of version v is written (everything was read and checked),
  // after_write(h) once they hold verified version h again (v, or the base after a revert).
  // While they hold no version (an anchor failed while loading) the window stays open: the
  // next write does not call before_write again, and after_write comes when a version is held.
  std::function<void(uint64_t version)> before_write{};
  std::function<void(uint64_t held)> after_write{};
};

struct CatchUpPlan {
  std::optional<uint64_t> anchor;  // none: deltas straight from the held version
  std::vector<uint64_t> deltas;
  uint64_t target = 0;
  std::string describe() const;
};

struct CatchUpReport {
  uint64_t version = 0;
  uint64_t anchors_loaded = 0;
  uint64_t deltas_applied = 0;
  uint64_t bytes_written = 0;          // into the destinations (reverts included)
  std::vector<std::string> fallbacks;  // why a plan was abandoned
  double seconds = 0;
};

class CatchUpReader {
 public:
  CatchUpReader(std::string root, std::vector<ReaderDestination> destinations,
                CatchUpOptions options = {});

  std::optional<uint64_t> held() const { return held_; }
  // The journal the held version belongs to (empty: none held, or a journal from before
  // identities).
  const std::string& held_journal_id() const { return held_journal_; }
  // Forgets the held version: the next catch_up starts from an anchor.
  void forget() { held_.reset(); }
  // C() of destination i at the held version (valid while held() has a value).
  uint64_t checksum(size_t i) const { return checksums_[i]; }

  // The plan from the held version to `target` (default: HEAD's version).
  Result<CatchUpPlan> plan(std::optional<uint64_t> target = {}) const;

  // Takes the destinations as holding `version` (an engine that loaded its weights itself)
  // once every tensor's checksum, computed from their memory, equals that version's manifest.
  // On a mismatch (kChecksumMismatch naming the first tensor that differs) or a version the
  // journal no longer has, nothing is held: the next catch_up loads an anchor.
  Status adopt(uint64_t version);

  // Bytes written into the destinations so far (anchors, deltas, reverts).
  uint64_t bytes_written() const { return bytes_written_; }
  // Bytes of delta parts and records read from the journal so far (anchors not counted).
  uint64_t delta_bytes_read() const { return delta_bytes_read_; }

  // Executes plans until the destinations hold `target` (default: HEAD's version), falling
  // back to older anchors as needed. Fails (naming every plan tried) only when no anchor
  // reaches the target.
  Result<CatchUpReport> catch_up(std::optional<uint64_t> target = {});

  // Applies a delta whose manifest and stored part bytes arrived on a live transport
  // (`source` names it in errors) with every check of a step read from the journal (manifest
  // limits, part sizes and XXH3s, record headers against the manifest, checksums), nothing
  // written before all pass. kFailedPrecondition when the held version is not its base; on
  // a failure while writing held() becomes empty, as for a journal step.
  Status apply_delta_from(const proto::StepManifest& delta,
                          std::vector<std::vector<uint8_t>> stored_parts,
                          const std::string& source);

  // One record's bytes as a live path serves them (src/endpoint/live_path.h LiveRankParts):
  // [offset, offset + bytes) of the step's part file `file`; nullopt where it does not serve them.
  using LiveRecordReader = std::function<Result<std::optional<std::vector<uint8_t>>>(
      const std::string& file, uint64_t offset, uint64_t bytes)>;
  // Applies delta `version`, which several publisher ranks wrote, as a journal step (its
  // manifest read from the journal, every check), reading each record through `live` where it
  // serves it and from the journal otherwise (delta_bytes_read() counts only the latter).
  // kFailedPrecondition when the held version is not version - 1; an error of `live` fails it.
  Status apply_delta_step_live(uint64_t version, const LiveRecordReader& live);

  // Catches up to HEAD, then polls HEAD every `poll` and catches up again, until the held
  // version reaches `until_version` (kDeadlineExceeded at `deadline`).
  Result<CatchUpReport> follow(uint64_t until_version,
                               std::chrono::steady_clock::time_point deadline,
                               std::chrono::milliseconds poll = std::chrono::milliseconds(20));

 private:
  Result<proto::JournalHead> head() const;
  // plan() against a HEAD already read (catch_up reads it once for both uses).
  Result<CatchUpPlan> plan_at(const proto::JournalHead& head, std::optional<uint64_t> target) const;
  // Why the held version is not one of the journal whose HEAD is `head` (empty: it is).
  std::string divergence(const proto::JournalHead& head) const;
  Result<std::vector<uint64_t>> anchors_at_or_below(uint64_t target,
                                                    std::vector<std::string>* notes) const;
  Status check_destinations(const proto::StepManifest& manifest, const std::string& what) const;
  // What each destination must hold at the manifest's version: its tensor's checksum, or its
  // slice's. And what destination i holds now, computed from its memory.
  Result<std::vector<uint64_t>> expected_checksums(const proto::StepManifest& manifest,
                                                   const std::string& what) const;
  Result<uint64_t> current_checksum(size_t i) const;
  // The ApplyOptions part that says where destination i's elements are.
  void place(size_t i, ApplyOptions* options) const;
  // Tensors several publisher ranks wrote (range_records.h): one record per changed range,
  // each applied into its elements of a whole, contiguous destination.
  static bool ranged(const proto::StepManifest& m, size_t i);
  TensorRef range_view(size_t i, const DeltaRecordHeader& h) const;
  Status check_ranged_destination(size_t i, const proto::TensorState& t,
                                  const std::string& what) const;
  // Slices of tensors in ranges: the held checksum plus every applied record's change must be
  // the version's slice checksum (ApplyOptions::caller_verifies).
  Status check_slice_sums(const proto::StepManifest& m,
                          std::span<const std::pair<size_t, DeltaRecordView>> records,
                          std::span<const std::optional<Result<ApplyReport>>> done,
                          std::span<const uint64_t> targets, const std::string& what) const;
  Status load_anchor(uint64_t version);
  Status apply_delta_step(uint64_t version, const LiveRecordReader* live = nullptr);
  using PartLoader = std::function<Result<std::vector<uint8_t>>(size_t index)>;
  // One record's bytes (part, offset and bytes in the decompressed part), for a tensor written
  // in ranges by several ranks; nullopt: read the whole part instead (a compressed one).
  using RecordLoader = std::function<Result<std::optional<std::vector<uint8_t>>>(
      uint32_t part, uint64_t offset, uint64_t bytes)>;
  Status apply_delta_manifest(const proto::StepManifest& m, const std::string& what,
                              const PartLoader& load_part, const RecordLoader& load_record = {});
  // After some records of a version failed (done[k] their outcomes): reverts the applied
  // ones and checks every touched tensor is back at its held checksum.
  // boxes[k]: the box record k covers (range_records.h), else null.
  Status revert_applied(const proto::StepManifest& m,
                        std::span<const std::pair<size_t, DeltaRecordView>> records,
                        std::span<const ShapedSlice* const> boxes, std::span<const ApplyUndo> undo,
                        std::span<const std::optional<Result<ApplyReport>>> done,
                        uint64_t* written);
  Status run_deltas(uint64_t from_exclusive, uint64_t target, CatchUpReport* report);
  void open_write_window(uint64_t version);
  void close_write_window();
  void log(const std::string& line) const;

  JournalLayout layout_;
  std::vector<ReaderDestination> destinations_;
  std::vector<TensorRef> refs_;  // where each destination's elements are written
  std::vector<std::optional<SliceDestination>> slices_;  // a destination's slice, if not whole
  CatchUpOptions options_;
  std::optional<uint64_t> held_;
  std::string held_journal_;
  std::string head_journal_;  // HEAD's journal_id as catch_up last read it
  std::vector<uint64_t> checksums_;
  uint64_t bytes_written_ = 0;
  uint64_t delta_bytes_read_ = 0;
  bool window_open_ = false;
  bool lease_steps_ = false;  // this catch_up protects the steps it reads with a lease
};

}  // namespace weightcast
