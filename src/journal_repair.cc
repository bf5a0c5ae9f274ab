#include "src/journal_repair.h"

#include "codec/base/thread_pool.h"
#include "src/journal_tool.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/step_commit.h"

namespace weightcast {

Result<RepairHeadReport> journal_repair_head(const std::string& root, size_t threads,
                                             const std::function<void(const std::string&)>& log) {
  const JournalLayout layout(root);
  ASSIGN_OR_RETURN(auto lock, JournalLock::acquire(layout, JournalLock::Mode::kRepair));
  auto existing = read_head_file(layout.head());
  if (existing.ok()) {
    return failed_precondition("HEAD of journal '" + root + "' is readable (" +
                               (existing->empty()
                                    ? std::string("empty")
                                    : "version " + std::to_string(existing->version())) +
                               "): nothing to repair");
  }
  ASSIGN_OR_RETURN(const std::vector<uint64_t> steps, layout.list_steps());
  if (steps.empty()) {
    return failed_precondition("journal '" + root +
                               "' has no step directory: nothing to rebuild HEAD from");
  }
  ThreadPool pool(threads);
  RepairHeadReport report;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const uint64_t v = *it;
    if (log) log("repair-head: trying version " + std::to_string(v));
    auto manifest = read_manifest_file(layout.manifest(v));
    if (!manifest.ok()) {
      report.rejected.push_back("version " + std::to_string(v) + ": " +
                                manifest.status().message());
      continue;
    }
    proto::JournalHead candidate;
    candidate.set_version(v);
    candidate.set_anchor_version(manifest->anchor_version());
    candidate.set_journal_id(manifest->journal_id().empty() ? new_journal_id()
                                                            : manifest->journal_id());
    candidate.set_committed_unix_ms(unix_now_ms());
    std::vector<std::vector<uint8_t>> storage;
    auto destinations = destinations_for(*manifest, &storage);
    if (!destinations.ok()) {
      report.rejected.push_back("version " + std::to_string(v) + ": " +
                                destinations.status().message());
      continue;
    }
    CatchUpOptions options;
    options.pool = &pool;
    options.log = log;
    options.assume_head = candidate;
    CatchUpReader reader(root, std::move(*destinations), options);
    auto replayed = reader.catch_up(v);
    if (!replayed.ok()) {
      report.rejected.push_back("version " + std::to_string(v) + ": " +
                                replayed.status().message());
      continue;
    }
    RETURN_IF_ERROR(write_head(layout, candidate));
    report.version = v;
    report.anchor_version = candidate.anchor_version();
    report.journal_id = candidate.journal_id();
    return report;
  }
  std::string all;
  for (const auto& r : report.rejected) all += "\n  " + r;
  return data_loss("journal '" + root + "': no step replays completely, HEAD not written:" + all);
}

}  // namespace weightcast
