// JournalWriter's versions written by several publisher ranks (journal_writer.h, "Versions
// written by several publisher ranks"): a delta merged from the ranks' fragments
// (rank_fragments.h) and an anchor whose shard files the ranks wrote (rank_anchor.h), each
// committed by commit_staged as any step.
#include <chrono>
#include <map>
#include <string>

#include "codec/base/hex.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/journal_writer.h"
#include "transport/fs/range_records.h"
#include "transport/fs/rank_anchor.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {
namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Removes a version's fragments directory at the end of the scope: committed, its parts were
// moved into the step; not, the version is written again from new fragments.
struct FragmentsCleanup {
  std::string dir;
  ~FragmentsCleanup() { (void)remove_tree(dir); }
};

}  // namespace

Result<PublishReport> JournalWriter::publish_rank_fragments(uint64_t version, uint32_t ranks,
                                                            std::chrono::milliseconds wait) {
  const double t0 = seconds_now();
  const std::string fragments = rank_fragments_dir(layout_, version);
  const FragmentsCleanup cleanup{fragments};
  if (!head_) {
    return failed_precondition("journal '" + layout_.root() +
                               "' is empty: rank fragments are deltas, publish an anchor first");
  }
  ASSIGN_OR_RETURN(const std::string staged, create_staging_dir(layout_, version));
  std::vector<std::map<std::string, std::string>> live;
  auto merged = merge_rank_fragments(layout_, head_manifest_, version, ranks, wait, staged, &live);
  if (!merged.ok()) {
    (void)remove_tree(staged);
    return merged.status();
  }
  PublishReport report;
  report.rank_live_descriptors = std::move(live);
  for (const auto& t : merged->tensors()) {
    report.changed_tensors += t.changed() ? 1 : 0;
    report.changed_elements += t.changed_elements();
  }
  const std::string how = "from " + std::to_string(ranks) + " publisher ranks' fragments";
  return commit_staged(staged, *std::move(merged), std::move(report), t0, how);
}

Result<std::string> JournalWriter::stage_rank_anchor(uint64_t version,
                                                     std::vector<SafetensorsTensorSpec> specs) {
  rank_anchor_.reset();
  ASSIGN_OR_RETURN(const std::string staged, stage_anchor(version));
  auto anchor = StreamingAnchorWriter::open(staged, std::move(specs), options_.anchor);
  const std::string ready = rank_anchor_ready_path(layout_, version);
  Status s = anchor.status();
  if (s.ok()) s = make_directories(rank_fragments_dir(layout_, version));
  if (s.ok()) s = write_file_atomically(ready, std::span<const uint8_t>());
  if (!s.ok()) {
    (void)remove_tree(staged);
    (void)remove_tree(rank_fragments_dir(layout_, version));
    return s;
  }
  rank_anchor_ = std::move(*anchor);
  rank_anchor_version_ = version;
  return staged;
}

Result<PublishReport> JournalWriter::publish_rank_anchor(uint64_t version, uint32_t ranks,
                                                         std::chrono::milliseconds wait) {
  const std::string what =
      "anchor " + std::to_string(version) + " of journal '" + layout_.root() + "'";
  if (!rank_anchor_ || rank_anchor_version_ != version) {
    return failed_precondition(what + " was not staged (stage_rank_anchor)");
  }
  std::unique_ptr<StreamingAnchorWriter> anchor = std::move(rank_anchor_);
  const FragmentsCleanup cleanup{rank_fragments_dir(layout_, version)};
  const std::string staged = anchor->dir();
  const auto refuse = [&](Status s) -> Status {
    (void)remove_tree(staged);
    return s;
  };
  if (Status s = wait_for_rank_fragments(layout_, version, ranks, wait); !s.ok()) {
    return refuse(std::move(s));
  }
  std::map<std::string, size_t, std::less<>> index;
  for (size_t i = 0; i < anchor->tensor_count(); ++i) index[anchor->tensor(i).name] = i;
  std::vector<uint64_t> sums(anchor->tensor_count(), 0);
  std::map<std::pair<std::string, std::string>, proto::SliceChecksum> shares;
  for (uint32_t rank = 0; rank < ranks; ++rank) {
    auto f = read_rank_fragment_file(rank_fragment_dir(layout_, version, rank) + "/FRAGMENT");
    if (!f.ok()) return refuse(f.status());
    if (f->kind() != proto::STEP_ANCHOR || f->version() != version) {
      return refuse(
          data_loss(what + ": rank " + std::to_string(rank) + "'s fragment is not of this anchor"));
    }
    for (const auto& t : f->tensors()) {
      const auto it = index.find(t.name());
      if (it == index.end()) {
        return refuse(failed_precondition(what + ": rank " + std::to_string(rank) +
                                          " wrote tensor '" + t.name() + "', not in the anchor"));
      }
      for (const auto& r : t.ranges()) {
        Status s;
        if (r.has_box()) {  // its rows, each a run of the file's elements
          for_each_slice_run(anchor->tensor(it->second).shape, range_slice(r),
                             [&](const SliceRun& run) {
                               s = anchor->mark_written(it->second, run.global, run.count);
                               return s.ok();
                             });
        } else {
          s = anchor->mark_written(it->second, r.range_offset(), r.range_elements());
        }
        if (!s.ok()) return refuse(s.with_context("rank " + std::to_string(rank)));
        sums[it->second] += r.checksum();
      }
    }
    for (const auto& s : f->slice_checksums()) {
      auto [at, fresh] = shares.try_emplace({s.tensor(), s.slice().SerializeAsString()}, s);
      if (!fresh) at->second.set_checksum(at->second.checksum() + s.checksum());
    }
  }
  proto::StepManifest manifest;
  if (Status s = anchor->finish(&manifest); !s.ok()) return refuse(std::move(s));
  for (size_t i = 0; i < sums.size(); ++i) {
    if (anchor->checksums()[i] == sums[i]) continue;
    return refuse(checksum_mismatch(what + ": tensor '" + anchor->tensor(i).name +
                                    "' reads back with checksum " + hex16(anchor->checksums()[i]) +
                                    ", the ranks wrote " + hex16(sums[i]) +
                                    " (a rank planned other offsets, or a write was lost)"));
  }
  for (auto& [key, s] : shares) *manifest.add_slice_checksums() = std::move(s);
  return publish_staged_anchor(version, staged, std::move(manifest),
                               "written by " + std::to_string(ranks) + " publisher ranks");
}

}  // namespace weightcast
