#include "transport/fs/rank_plan.h"

#include <filesystem>
#include <span>
#include <string_view>
#include <thread>

#include "codec/base/file_io.h"
#include "transport/fs/rank_anchor.h"
#include "transport/fs/rank_fragments.h"

namespace weightcast {
namespace {

constexpr auto kPlanPoll = std::chrono::milliseconds(2);
constexpr size_t kMaxRefusalBytes = 4096;

std::string delta_plan_path(const JournalLayout& layout, uint64_t version) {
  return rank_fragments_dir(layout, version) + "/DELTA";
}

std::string refusal_path(const JournalLayout& layout, uint64_t version, uint32_t rank) {
  return rank_fragment_dir(layout, version, rank) + ".refused";
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

Status put_rank_delta_plan(const JournalLayout& layout, uint64_t version) {
  RETURN_IF_ERROR(make_directories(rank_fragments_dir(layout, version)));
  return write_file_atomically(delta_plan_path(layout, version), std::span<const uint8_t>());
}

Result<RankVersionKind> wait_for_rank_plan(const JournalLayout& layout, uint64_t version,
                                           uint32_t rank, std::chrono::milliseconds wait) {
  const std::string ready = rank_anchor_ready_path(layout, version);
  const std::string delta = delta_plan_path(layout, version);
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (exists(ready)) return RankVersionKind::kAnchor;
    if (exists(delta)) return RankVersionKind::kDelta;
    if (std::chrono::steady_clock::now() >= until) {
      return deadline_exceeded(
          "publisher rank " + std::to_string(rank) + ", version " + std::to_string(version) +
          ": the lead rank (0) did not start it in '" + layout.root() + "' within " +
          std::to_string(wait.count()) + " ms (no '" + ready + "' or '" + delta + "')");
    }
    std::this_thread::sleep_for(kPlanPoll);
  }
}

std::optional<uint64_t> newest_rank_plan(const JournalLayout& layout) {
  std::optional<uint64_t> newest;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(layout.staging(), ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view kSuffix = ".ranks";
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
    const auto version = JournalLayout::parse_step_dir_name(
        std::string_view(name).substr(0, name.size() - kSuffix.size()));
    if (!version) continue;
    if (!exists(rank_anchor_ready_path(layout, *version)) &&
        !exists(delta_plan_path(layout, *version))) {
      continue;
    }
    if (!newest || *version > *newest) newest = version;
  }
  return newest;
}

Status put_rank_refusal(const JournalLayout& layout, uint64_t version, uint32_t rank,
                        const std::string& why) {
  RETURN_IF_ERROR(make_directories(rank_fragments_dir(layout, version)));
  const std::string text = why.substr(0, kMaxRefusalBytes);
  return write_file_atomically(
      refusal_path(layout, version, rank),
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

std::optional<std::string> rank_refusal(const JournalLayout& layout, uint64_t version,
                                        uint32_t rank) {
  const std::string path = refusal_path(layout, version, rank);
  if (!exists(path)) return std::nullopt;
  auto bytes = read_whole_file(path, kMaxRefusalBytes);
  if (!bytes.ok())
    return "(its refusal '" + path + "' is unreadable: " + bytes.status().message() + ")";
  return std::string(bytes->begin(), bytes->end());
}

}  // namespace weightcast
