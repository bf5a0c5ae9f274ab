// Where things lie under a journal root (ARCHITECTURE.md §5 "fs"):
//
//   HEAD                      newest committed version and newest anchor (atomic replace)
//   v00000000000000000018/    one step: MANIFEST plus its part or shard files
//   .staging/                 steps being written, never read; cleaned when a writer starts
//   leases/                   <holder>.lease: readers replaying from a version
//   LOCK                      flock'ed by the one live writer
//
// A step directory exists under the root only once complete (renamed from .staging/); it is
// committed once HEAD names a version >= its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"

namespace weightcast {

class JournalLayout {
 public:
  explicit JournalLayout(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string head() const { return root_ + "/HEAD"; }
  std::string lock() const { return root_ + "/LOCK"; }
  std::string staging() const { return root_ + "/.staging"; }
  std::string leases() const { return root_ + "/leases"; }
  std::string step(uint64_t version) const { return root_ + "/" + step_dir_name(version); }
  std::string manifest(uint64_t version) const { return step(version) + "/MANIFEST"; }
  std::string lease(const std::string& holder) const { return leases() + "/" + holder + ".lease"; }

  static std::string step_dir_name(uint64_t version);
  // The version a step directory name stands for; nullopt for any other name.
  static std::optional<uint64_t> parse_step_dir_name(std::string_view name);

  // Versions of the step directories under the root, ascending (committed or not).
  Result<std::vector<uint64_t>> list_steps() const;

 private:
  std::string root_;
};

// Creates `dir` (and parents) if missing; errors name the directory.
Status make_directories(const std::string& dir);

// Removes a directory tree; a missing one is fine. Errors name the path.
Status remove_tree(const std::string& path);

}  // namespace weightcast
