// JournalWriter's anchors streamed during the optimizer step (journal_writer.h, "Anchors
// streamed during the optimizer step"): the staging directory a StreamingAnchorWriter writes
// into, and the commit of what it finished, by the protocol publish() commits an anchor with
// (commit_staged, which journal_writer_ranks.cc commits with too).
#include <unistd.h>

#include <chrono>
#include <string>

#include "transport/fs/journal_files.h"
#include "transport/fs/journal_writer.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {
namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The writer field of a manifest, as publish() fills it: "host:pid".
std::string stream_writer_id() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

}  // namespace

Result<std::string> JournalWriter::stage_anchor(uint64_t version) {
  if (head_ && version <= head_->version()) {
    return failed_precondition("anchor version " + std::to_string(version) + " is not newer than " +
                               std::to_string(head_->version()) + " in journal '" + layout_.root() +
                               "'");
  }
  return create_staging_dir(layout_, version);
}

Result<PublishReport> JournalWriter::publish_staged_anchor(uint64_t version,
                                                           const std::string& staged_dir,
                                                           proto::StepManifest manifest,
                                                           std::string why) {
  const double t0 = seconds_now();
  const std::string expected = layout_.staging() + "/" + JournalLayout::step_dir_name(version);
  if (staged_dir != expected) {
    // Not ours to remove: it is not the staging directory of this version.
    return invalid_argument("publish_staged_anchor: '" + staged_dir +
                            "' is not the staging directory of version " + std::to_string(version) +
                            " ('" + expected + "')");
  }
  const auto refuse = [&](Status s) -> Status {
    (void)remove_tree(staged_dir);  // best effort: the next writer cleans .staging/ anyway
    return s;
  };
  if (head_ && version <= head_->version()) {
    return refuse(failed_precondition("anchor version " + std::to_string(version) +
                                      " is not newer than " + std::to_string(head_->version()) +
                                      " in journal '" + layout_.root() + "'"));
  }
  if (manifest.kind() != proto::STEP_ANCHOR || manifest.index_file().empty() ||
      manifest.parts_size() == 0) {
    return refuse(invalid_argument(
        "publish_staged_anchor: the manifest of version " + std::to_string(version) +
        " is not that of a finished anchor (StreamingAnchorWriter::finish fills it)"));
  }
  manifest.set_version(version);
  manifest.set_kind(proto::STEP_ANCHOR);
  manifest.set_anchor_version(version);
  manifest.set_base_version(0);
  PublishReport report;
  report.anchor = true;
  report.why_anchor = std::move(why);
  report.changed_tensors = static_cast<uint64_t>(manifest.tensors_size());
  const std::string how = "as streamed anchor (" + report.why_anchor + ")";
  return commit_staged(staged_dir, std::move(manifest), std::move(report), t0, how);
}

Result<PublishReport> JournalWriter::commit_staged(const std::string& staged_dir,
                                                   proto::StepManifest manifest,
                                                   PublishReport report, double t0,
                                                   const std::string& how) {
  const uint64_t version = manifest.version();
  manifest.set_format_version(kJournalFormatVersion);
  manifest.set_created_unix_ms(unix_now_ms());
  manifest.set_writer(stream_writer_id());
  manifest.set_journal_id(lock_.journal_id());
  if (Status s = commit_step(layout_, staged_dir, manifest, options_.before_head); !s.ok()) {
    (void)remove_tree(staged_dir);  // best effort: the next writer cleans .staging/ anyway
    return s;
  }
  report.version = version;
  for (const auto& p : manifest.parts()) report.stored_bytes += p.bytes();
  head_ = proto::JournalHead();
  head_->set_version(version);
  head_->set_anchor_version(manifest.anchor_version());
  head_->set_journal_id(manifest.journal_id());
  head_manifest_ = std::move(manifest);
  // Fragments a late rank left for this version or an abandoned one before it.
  (void)remove_rank_fragments_up_to(layout_, version);
  if (options_.collect_garbage_after_publish) {
    ASSIGN_OR_RETURN(report.gc, collect_garbage(layout_, options_.retention, unix_now_ms()));
  }
  report.seconds = seconds_now() - t0;
  if (options_.log) {
    options_.log("published version " + std::to_string(version) + " " + how + ": " +
                 std::to_string(report.stored_bytes) + " bytes, " + std::to_string(report.seconds) +
                 " s to commit");
  }
  return report;
}

}  // namespace weightcast
