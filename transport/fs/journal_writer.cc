#include "transport/fs/journal_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "codec/base/thread_pool.h"
#include "codec/delta_encoder.h"
#include "codec/delta_manifest.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string writer_id() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

bool same_tensor_set(std::span<const PublishTensor> tensors, const proto::StepManifest& m) {
  if (tensors.size() != static_cast<size_t>(m.tensors_size())) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = m.tensors(static_cast<int>(i));
    if (t.name() != tensors[i].name || t.dtype() != dtype_to_proto(tensors[i].dtype) ||
        !std::equal(t.shape().begin(), t.shape().end(), tensors[i].shape.begin(),
                    tensors[i].shape.end())) {
      return false;
    }
  }
  return true;
}

bool has_record(const SnapshotAdvance* advance, size_t i) {
  return advance != nullptr && i < advance->encoded.size() && advance->encoded[i] != nullptr;
}

// Where each tensor's bytes of the version being published are: a snapshot brought to it,
// else the tensor itself (hooked tensors, or no snapshot).
std::vector<PublishTensor> version_bytes(std::span<const PublishTensor> current,
                                         const SnapshotAdvance* advance) {
  std::vector<PublishTensor> out(current.begin(), current.end());
  if (advance == nullptr) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!has_record(advance, i) && i < advance->snapshot.size() && !advance->snapshot[i].empty()) {
      out[i].bytes = advance->snapshot[i];
    }
  }
  return out;
}

uint64_t tensor_bytes(const PublishTensor& t) {
  uint64_t n = dtype_size(t.dtype);
  for (const int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

Result<std::unique_ptr<JournalWriter>> JournalWriter::open(JournalOptions options) {
  if (options.root.empty()) return invalid_argument("journal root is empty");
  JournalLayout layout(options.root);
  ASSIGN_OR_RETURN(auto lock, JournalLock::acquire(layout));
  std::unique_ptr<JournalWriter> writer(new JournalWriter(std::move(options), std::move(lock)));
  writer->head_ = writer->lock_.head_at_start();
  if (writer->head_) {
    ASSIGN_OR_RETURN(writer->head_manifest_,
                     read_manifest_file(layout.manifest(writer->head_->version())));
  }
  return writer;
}

JournalWriter::JournalWriter(JournalOptions options, JournalLock lock)
    : options_(std::move(options)), layout_(options_.root), lock_(std::move(lock)) {}

Result<std::string> JournalWriter::delta_refusal(uint64_t version,
                                                 std::span<const PublishTensor> current,
                                                 std::span<const PublishTensor> previous,
                                                 const SnapshotAdvance* advance) const {
  if (!head_) return std::string("first version");
  if (version != head_->version() + 1) {
    return "version " + std::to_string(version) + " does not follow " +
           std::to_string(head_->version());
  }
  if (!same_tensor_set(current, head_manifest_)) return std::string("the set of tensors changed");
  if (previous.empty()) return std::string("no previous tensors given");
  if (!same_tensor_set(previous, head_manifest_)) {
    return invalid_argument("the previous tensors are not those of version " +
                            std::to_string(head_->version()) +
                            " (names, dtypes and shapes in manifest order)");
  }
  for (size_t i = 0; i < current.size(); ++i) {
    if (has_record(advance, i)) continue;
    if (dtype_size(current[i].dtype) == 8 &&
        (current[i].bytes.size() != previous[i].bytes.size() ||
         std::memcmp(current[i].bytes.data(), previous[i].bytes.data(), current[i].bytes.size()) !=
             0)) {
      return "8-byte tensor '" + current[i].name + "' changed";
    }
  }
  // Last, so that "every N" means a delta could have been written (publish relies on it).
  if (options_.anchor_every > 0 && version - head_->anchor_version() >= options_.anchor_every) {
    return "every " + std::to_string(options_.anchor_every) + " versions";
  }
  return std::string();
}

std::string JournalWriter::anchor_reason(uint64_t version, std::span<const PublishTensor> current,
                                         bool force_anchor) const {
  if (!head_) return "first version";
  if (version != head_->version() + 1) {
    return "version " + std::to_string(version) + " does not follow " +
           std::to_string(head_->version());
  }
  if (!same_tensor_set(current, head_manifest_)) return "the set of tensors changed";
  if (options_.anchor_every > 0 && version - head_->anchor_version() >= options_.anchor_every) {
    return "every " + std::to_string(options_.anchor_every) + " versions";
  }
  return force_anchor ? "requested" : "";
}

Result<PublishReport> JournalWriter::publish(uint64_t version,
                                             std::span<const PublishTensor> current,
                                             std::span<const PublishTensor> previous,
                                             bool force_anchor, const SnapshotAdvance* advance) {
  const double t0 = now_s();
  if (head_ && version <= head_->version()) {
    return failed_precondition("version " + std::to_string(version) + " is not newer than " +
                               std::to_string(head_->version()) + " in journal '" + layout_.root() +
                               "'");
  }
  PublishReport report;
  report.version = version;
  ASSIGN_OR_RETURN(report.why_anchor, delta_refusal(version, current, previous, advance));
  bool delta_possible = report.why_anchor.empty() || report.why_anchor.starts_with("every ");
  if (advance != nullptr && advance->anchor_only) {
    delta_possible = false;
    if (report.why_anchor.empty()) {
      report.why_anchor = "the step did not start from version " + std::to_string(version - 1);
    }
  }
  if (force_anchor && report.why_anchor.empty()) report.why_anchor = "requested";
  report.anchor = !report.why_anchor.empty();

  ASSIGN_OR_RETURN(const std::string staged, create_staging_dir(layout_, version));
  proto::StepManifest manifest;
  manifest.set_format_version(kJournalFormatVersion);
  manifest.set_version(version);
  manifest.set_created_unix_ms(unix_now_ms());
  manifest.set_writer(writer_id());
  manifest.set_journal_id(lock_.journal_id());
  Status written = ok_status();
  const std::function<Status()> before_commit =
      advance != nullptr ? advance->before_commit : std::function<Status()>();
  if (!report.anchor) {
    std::string needs_anchor;
    written =
        write_delta_step(staged, current, previous, &manifest, &report, &needs_anchor, advance);
    if (written.ok() && !needs_anchor.empty()) {
      report = PublishReport{};
      report.version = version;
      report.anchor = true;
      report.why_anchor = needs_anchor;
      delta_possible = false;
    }
  }
  if (written.ok() && report.anchor) {
    RETURN_IF_ERROR(remove_tree(staged));
    ASSIGN_OR_RETURN(const std::string fresh, create_staging_dir(layout_, version));
    // An anchor that could have been a delta carries that delta too (in delta/), so a reader
    // falling back to an older anchor can replay through this version.
    proto::StepManifest delta;  // written once the slice checksums are known (below)
    if (delta_possible) {
      delta = manifest;
      PublishReport ignored;
      std::string unused;
      written = make_directories(fresh + "/delta");
      if (written.ok()) {
        written = write_delta_step(fresh + "/delta", current, previous, &delta, &ignored, &unused,
                                   advance);
      }
      if (written.ok() && ignored.delta) report.delta = std::move(ignored.delta);
    }
    manifest.clear_parts();
    manifest.clear_tensors();
    // With a snapshot, the anchor is written from it once it holds current's bytes (a delta
    // just advanced it, or it is copied whole here), and the caller has current back.
    std::vector<PublishTensor> from_snapshot;
    bool any_record = false;
    if (written.ok() && advance != nullptr) {
      for (size_t i = 0; i < current.size(); ++i) {
        if (has_record(advance, i)) {
          any_record = true;
          if (!advance->anchor_files && current[i].bytes.size() != tensor_bytes(current[i])) {
            written = invalid_argument("tensor '" + current[i].name + "': version " +
                                       std::to_string(version) +
                                       " is an anchor and its bytes were not given");
          }
          from_snapshot.push_back(current[i]);
          continue;
        }
        const std::span<uint8_t> snap = advance->snapshot[i];
        if (!delta_possible && !snap.empty() && snap.data() != current[i].bytes.data()) {
          std::memcpy(snap.data(), current[i].bytes.data(), snap.size());
        }
        from_snapshot.push_back({current[i].name, current[i].dtype, current[i].shape, snap});
      }
      // Hooked tensors are read where they live, so the caller has them back only after.
      if (!any_record && advance->current_read) advance->current_read();
    }
    if (written.ok()) {
      written = write_anchor_step(fresh, advance != nullptr ? from_snapshot : current, &manifest,
                                  &report, advance != nullptr ? &advance->anchor_files : nullptr);
    }
    // The slice checksums, while hooked tensors still hold the version.
    if (written.ok()) {
      written = add_slice_checksums(advance != nullptr ? from_snapshot : current,
                                    options_.declared_slices, options_.pool, &manifest);
    }
    if (any_record && advance->current_read) advance->current_read();
    if (written.ok() && delta_possible) {
      *delta.mutable_slice_checksums() = manifest.slice_checksums();
      written = write_manifest_file(fresh + "/delta", delta);
      if (written.ok() && report.delta) report.delta->manifest = delta;
    }
    if (written.ok()) {
      written = commit_step(layout_, fresh, manifest, options_.before_head, before_commit);
    }
  } else if (written.ok()) {
    written = add_slice_checksums(version_bytes(current, advance), options_.declared_slices,
                                  options_.pool, &manifest, tracked_sums(slice_changes_));
    slice_changes_.clear();
    if (advance != nullptr && advance->current_read) advance->current_read();
    if (written.ok()) {
      written = commit_step(layout_, staged, manifest, options_.before_head, before_commit);
    }
  }
  if (!written.ok()) {
    (void)remove_tree(staged);  // best effort: the next writer cleans .staging/ anyway
    return written;
  }
  if (report.delta && !report.anchor) report.delta->manifest = manifest;
  head_ = proto::JournalHead();
  head_->set_version(version);
  head_->set_anchor_version(manifest.anchor_version());
  head_->set_journal_id(manifest.journal_id());
  head_manifest_ = std::move(manifest);
  (void)remove_rank_fragments_up_to(layout_, version);  // a late publisher rank's leftovers
  if (options_.collect_garbage_after_publish) {
    ASSIGN_OR_RETURN(report.gc, collect_garbage(layout_, options_.retention, unix_now_ms()));
  }
  report.seconds = now_s() - t0;
  if (options_.log) {
    options_.log("published version " + std::to_string(version) + " as " +
                 (report.anchor ? "anchor (" + report.why_anchor + ")" : std::string("delta")) +
                 ": " + std::to_string(report.stored_bytes) + " bytes, " +
                 std::to_string(report.changed_tensors) + " tensors changed, " +
                 std::to_string(report.seconds) + " s");
  }
  return report;
}

Status JournalWriter::write_anchor_step(
    const std::string& staged, std::span<const PublishTensor> current,
    proto::StepManifest* manifest, PublishReport* report,
    const std::function<Status(const std::string&, proto::StepManifest*)>* files) {
  manifest->set_kind(proto::STEP_ANCHOR);
  manifest->set_anchor_version(manifest->version());
  manifest->set_base_version(0);
  if (files != nullptr && *files) {
    RETURN_IF_ERROR((*files)(staged, manifest));
  } else {
    RETURN_IF_ERROR(write_anchor(staged, current, options_.anchor, manifest));
  }
  for (const auto& p : manifest->parts()) report->stored_bytes += p.bytes();
  report->changed_tensors = current.size();
  return ok_status();
}

Status JournalWriter::write_delta_step(const std::string& staged,
                                       std::span<const PublishTensor> current,
                                       std::span<const PublishTensor> previous,
                                       proto::StepManifest* manifest, PublishReport* report,
                                       std::string* needs_anchor, const SnapshotAdvance* advance) {
  manifest->set_kind(proto::STEP_DELTA);
  manifest->set_base_version(manifest->version() - 1);
  manifest->set_anchor_version(head_->anchor_version());
  DeltaPartWriter parts(staged, options_.delta, manifest);
  for (size_t i = 0; i < current.size(); ++i) {
    if (has_record(advance, i)) continue;
    if (current[i].bytes.size() != previous[i].bytes.size()) {
      return invalid_argument("tensor '" + current[i].name + "' has " +
                              std::to_string(current[i].bytes.size()) + " bytes now and " +
                              std::to_string(previous[i].bytes.size()) + " before");
    }
  }
  // Tensors of a few chunks are encoded side by side, one per thread; larger ones one at a
  // time, each spread over the pool by chunks (a pool runs one parallel_for at a time). The
  // records are added to the parts in tensor order either way.
  const size_t threads = options_.pool != nullptr ? options_.pool->size() : 1;
  std::vector<size_t> small, large;
  std::vector<std::optional<Result<EncodedDelta>>> encoded(current.size());
  for (size_t i = 0; i < current.size(); ++i) {
    if (has_record(advance, i)) {
      encoded[i] = std::move(*advance->encoded[i]);
      continue;
    }
    if (dtype_size(current[i].dtype) == 8) continue;  // unchanged: delta_refusal checked
    const uint64_t chunks =
        current[i].bytes.size() / dtype_size(current[i].dtype) / kDefaultChunkElements + 1;
    (chunks >= 2 * threads ? large : small).push_back(i);
  }
  slice_changes_ = track_slice_changes(
      current, options_.declared_slices, head_manifest_,
      [&](size_t i) { return !has_record(advance, i) && dtype_size(current[i].dtype) != 8; });
  const auto encode_one = [&](size_t i, ThreadPool* pool) {
    EncodeOptions e;
    if (SliceChangeSums* sums = slice_changes_[i].get()) {
      e.on_changes = [sums](uint64_t first, const uint32_t* positions, uint32_t n,
                            const uint8_t* old_chunk, const uint8_t* new_chunk) {
        sums->add(first, positions, n, old_chunk, new_chunk);
      };
    }
    e.name = current[i].name;
    e.dtype = current[i].dtype;
    e.base_version = manifest->base_version();
    e.target_version = manifest->version();
    e.pool = pool;
    encoded[i] = advance != nullptr
                     ? encode_delta_advancing(advance->snapshot[i], current[i].bytes, e)
                     : encode_delta(previous[i].bytes, current[i].bytes, e);
  };
  if (options_.pool != nullptr && small.size() > 1) {
    options_.pool->parallel_for(small.size(), [&](size_t k) { encode_one(small[k], nullptr); });
  } else {
    for (const size_t i : small) encode_one(i, nullptr);
  }
  // Each record goes into the parts (in tensor order) as soon as it and those before it are
  // encoded, so the records held at once are those of the small tensors, not the delta.
  const auto add_tensor = [&](size_t i) -> Status {
    const proto::TensorState& before = head_manifest_.tensors(static_cast<int>(i));
    proto::TensorState* t = manifest->add_tensors();
    t->set_name(before.name());
    t->set_dtype(before.dtype());
    *t->mutable_shape() = before.shape();
    t->set_checksum(before.checksum());
    if (!encoded[i]) return ok_status();
    if (!encoded[i]->ok()) return encoded[i]->status();
    EncodedDelta& delta = **encoded[i];
    if (delta.header.base_checksum != before.checksum()) {
      return failed_precondition("previous bytes of tensor '" + current[i].name +
                                 "' are not those of version " +
                                 std::to_string(manifest->base_version()) + " (checksum " +
                                 std::to_string(delta.header.base_checksum) + ", manifest " +
                                 std::to_string(before.checksum()) + ")");
    }
    if (delta.header.changed == 0) return ok_status();
    t->set_checksum(delta.header.target_checksum);
    t->set_changed_elements(delta.header.changed);
    RETURN_IF_ERROR(parts.add_record(t, delta.record));
    encoded[i].reset();  // its bytes are in the part now
    ++report->changed_tensors;
    report->changed_elements += delta.header.changed;
    return ok_status();
  };
  size_t added = 0;
  const auto add_until = [&](size_t end) -> Status {
    for (; added < end; ++added) RETURN_IF_ERROR(add_tensor(added));
    return ok_status();
  };
  for (const size_t i : large) {
    encode_one(i, options_.pool);
    RETURN_IF_ERROR(add_until(i + 1));
  }
  RETURN_IF_ERROR(add_until(current.size()));
  RETURN_IF_ERROR(parts.finish());
  report->stored_bytes = parts.stored_bytes();
  if (options_.delta.keep_in_memory) report->delta = DeltaInMemory{{}, parts.take_stored_parts()};
  // A delta as large as the model buys nothing over an anchor a reader can start from.
  uint64_t model_bytes = 0;
  for (const auto& t : current) model_bytes += tensor_bytes(t);
  if (model_bytes > 0 && parts.raw_bytes() >= model_bytes) *needs_anchor = "delta not smaller";
  return ok_status();
}

}  // namespace weightcast
