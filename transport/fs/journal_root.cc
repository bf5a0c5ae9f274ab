#include "transport/fs/journal_root.h"

#include <dirent.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>

#include "transport/fs/journal_layout.h"

namespace weightcast {
namespace {

bool exists_as(const std::string& path, mode_t kind) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

bool has_step_directory(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return false;
  while (const dirent* e = ::readdir(d.get())) {
    if (JournalLayout::parse_step_dir_name(e->d_name) &&
        exists_as(dir + "/" + e->d_name, S_IFDIR)) {
      return true;
    }
  }
  return false;
}

bool is_journal_root(const std::string& dir) {
  const JournalLayout layout(dir == "/" ? "" : dir);
  if (exists_as(layout.root() + "/JOURNAL", S_IFREG)) return true;
  if (exists_as(layout.lock(), S_IFREG)) return true;
  if (exists_as(layout.staging(), S_IFDIR)) return true;
  return exists_as(layout.head(), S_IFREG) && has_step_directory(dir);
}

}  // namespace

std::optional<std::string> enclosing_journal_root(const std::string& dir) {
  std::filesystem::path p(dir);
  while (true) {
    if (is_journal_root(p.string())) return p.string();
    if (!p.has_parent_path() || p.parent_path() == p) return std::nullopt;
    p = p.parent_path();
  }
}

}  // namespace weightcast
