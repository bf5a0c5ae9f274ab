#include "transport/fs/retention.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "codec/base/file_io.h"
#include "transport/fault_point.h"
#include "transport/fs/journal_files.h"
#include "transport/fs/step_commit.h"

namespace weightcast {

Status write_lease(const JournalLayout& layout, const std::string& holder, uint64_t version,
                   int64_t now_unix_ms, int64_t ttl_ms) {
  if (!is_safe_part_file_name(holder)) {
    return invalid_argument("lease holder '" + holder + "' is not a safe file name");
  }
  RETURN_IF_ERROR(make_directories(layout.leases()));
  proto::Lease lease;
  lease.set_holder(holder);
  lease.set_version(version);
  lease.set_expires_unix_ms(now_unix_ms + ttl_ms);
  RETURN_IF_ERROR(write_journal_file(layout.lease(holder), JournalFileKind::kLease, lease));
  fault_point("journal.leased", version);  // the lease on disk, the replay not yet begun
  return ok_status();
}

Status release_lease(const JournalLayout& layout, const std::string& holder) {
  if (!is_safe_part_file_name(holder)) {
    return invalid_argument("lease holder '" + holder + "' is not a safe file name");
  }
  return remove_file_durably(layout.lease(holder));
}

Result<std::vector<proto::Lease>> list_leases(const JournalLayout& layout,
                                              std::vector<std::string>* unreadable) {
  std::vector<proto::Lease> leases;
  std::error_code ec;
  std::filesystem::directory_iterator it(layout.leases(), ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return leases;
    return io_error("cannot list '" + layout.leases() + "': " + ec.message());
  }
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with(".lease")) continue;  // temp files of a lease being written
    auto lease = read_lease_file(it->path().string());
    if (lease.ok()) {
      leases.push_back(*lease);
    } else if (unreadable != nullptr) {
      unreadable->push_back(it->path().string() + ": " + lease.status().message());
    }
  }
  if (ec) return io_error("cannot list '" + layout.leases() + "': " + ec.message());
  return leases;
}

namespace {

// Temporary files of lease writes whose writer died (`.<holder>.lease.tmp.<pid>`): a live
// writer renames its temp file within milliseconds, so one older than a minute is stale.
Status remove_stale_lease_temps(const JournalLayout& layout) {
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& entry : std::filesystem::directory_iterator(layout.leases(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(".") || name.find(".lease.tmp.") == std::string::npos) continue;
    const auto written = std::filesystem::last_write_time(entry.path(), ec);
    if (!ec && now - written > std::chrono::minutes(1)) {
      RETURN_IF_ERROR(remove_file_durably(entry.path().string()));
    }
  }
  return ok_status();
}

}  // namespace

Result<GcReport> collect_garbage(const JournalLayout& layout, const RetentionPolicy& policy,
                                 int64_t now_unix_ms) {
  GcReport report;
  ASSIGN_OR_RETURN(auto head, read_journal_head(layout));
  if (!head) return report;
  ASSIGN_OR_RETURN(auto steps, layout.list_steps());

  // Anchors at or below HEAD, newest first; HEAD's own anchor is always among those kept.
  std::vector<uint64_t> anchors;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it > head->version()) continue;
    auto manifest = read_manifest_file(layout.manifest(*it));
    if (manifest.ok() && manifest->kind() == proto::STEP_ANCHOR) anchors.push_back(*it);
  }
  const size_t keep = std::max<size_t>(1, policy.keep_anchors);
  uint64_t keep_from = head->anchor_version();
  for (size_t i = 0; i < anchors.size() && i < keep; ++i)
    keep_from = std::min(keep_from, anchors[i]);

  std::vector<std::string> unreadable;
  ASSIGN_OR_RETURN(auto leases, list_leases(layout, &unreadable));
  for (const auto& lease : leases) {
    if (lease.expires_unix_ms() <= now_unix_ms) {
      RETURN_IF_ERROR(release_lease(layout, lease.holder()));
      report.expired_leases.push_back(lease.holder());
    } else {
      keep_from = std::min(keep_from, lease.version());
    }
  }
  // A lease file we cannot read might protect anything: keep everything this time.
  if (!unreadable.empty()) keep_from = 0;
  RETURN_IF_ERROR(remove_stale_lease_temps(layout));
  report.keep_from = keep_from;

  for (const uint64_t v : steps) {
    if (v >= keep_from) break;
    const std::string hidden = layout.staging() + "/gc-" + JournalLayout::step_dir_name(v);
    RETURN_IF_ERROR(make_directories(layout.staging()));
    RETURN_IF_ERROR(remove_tree(hidden));
    if (std::rename(layout.step(v).c_str(), hidden.c_str()) != 0) {
      return io_error("cannot move '" + layout.step(v) +
                      "' out of the journal: " + std::strerror(errno));
    }
    RETURN_IF_ERROR(remove_tree(hidden));
    report.removed.push_back(v);
  }
  if (!report.removed.empty()) RETURN_IF_ERROR(fsync_directory(layout.root()));
  return report;
}

}  // namespace weightcast
