#include "transport/fs/journal_layout.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace weightcast {

std::string JournalLayout::step_dir_name(uint64_t version) {
  char name[32];
  std::snprintf(name, sizeof name, "v%020llu", static_cast<unsigned long long>(version));
  return name;
}

std::optional<uint64_t> JournalLayout::parse_step_dir_name(std::string_view name) {
  if (name.size() != 21 || name[0] != 'v') return std::nullopt;
  uint64_t v = 0;
  for (const char c : name.substr(1)) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

Result<std::vector<uint64_t>> JournalLayout::list_steps() const {
  std::error_code ec;
  std::filesystem::directory_iterator it(root_, ec);
  if (ec) return io_error("cannot list journal root '" + root_ + "': " + ec.message());
  std::vector<uint64_t> versions;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return io_error("cannot list journal root '" + root_ + "': " + ec.message());
    auto v = parse_step_dir_name(it->path().filename().string());
    if (v && it->is_directory(ec)) versions.push_back(*v);
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

Status make_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create directory '" + dir + "': " + ec.message());
  return ok_status();
}

Status remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return io_error("cannot remove '" + path + "': " + ec.message());
  return ok_status();
}

}  // namespace weightcast
