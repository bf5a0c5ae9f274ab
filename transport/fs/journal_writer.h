// The publisher side of the filesystem journal: every version becomes a step directory, an
// anchor (full safetensors snapshot) or a delta (sparse records against the version before),
// committed by the protocol of step_commit.h, after which retention runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/dtype.h"
#include "codec/status.h"
#include "codec/tensor_bytes.h"
#include "transport/fs/anchor_writer.h"
#include "transport/fs/delta_step.h"
#include "transport/fs/retention.h"
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
};

// A tensor of the model at one version: contiguous little-endian host bytes.
using PublishTensor = TensorBytesView;

// A version's delta from the version before, as a live transport serves it: the delta
// manifest (for an anchor: the one of the delta it carries) and each part's stored bytes.
struct DeltaInMemory {
  proto::StepManifest manifest;
  std::vector<std::vector<uint8_t>> parts;
};

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
};

// Publishing with one copy of the model instead of two (what a publisher's snapshot needs):
// `snapshot[i]` holds previous[i]'s bytes (the same memory; every tensor, previous given or
// not) and is brought to current[i]'s as the step is written, a delta's changed chunks as they
// are encoded (encode_delta_advancing), whole tensors otherwise. `current_read` is called once
// current's bytes were read for the last time (the caller may change them from then on),
// before an anchor's files are written, which they then are from the snapshot. On an error
// the snapshot's contents are unspecified.
struct SnapshotAdvance {
  std::span<const std::span<uint8_t>> snapshot;
  std::function<void()> current_read;
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

 private:
  JournalWriter(JournalOptions options, JournalLock lock);
  Result<std::string> delta_refusal(uint64_t version, std::span<const PublishTensor> current,
                                    std::span<const PublishTensor> previous) const;
  Status write_anchor_step(const std::string& staged, std::span<const PublishTensor> current,
                           proto::StepManifest* manifest, PublishReport* report);
  Status write_delta_step(const std::string& staged, std::span<const PublishTensor> current,
                          std::span<const PublishTensor> previous, proto::StepManifest* manifest,
                          PublishReport* report, std::string* needs_anchor,
                          const SnapshotAdvance* advance);

  JournalOptions options_;
  JournalLayout layout_;
  JournalLock lock_;
  std::optional<proto::JournalHead> head_;
  proto::StepManifest head_manifest_;
};

}  // namespace weightcast
