#include "src/endpoint/live_path.h"

#include <algorithm>
#include <utility>

#include "src/endpoint/nccl_live_path.h"
#include "src/endpoint/ucx_live.h"

namespace weightcast {
namespace {

bool listed(const proto::GroupConfig& config, const std::string& name) {
  return std::find(config.transports().begin(), config.transports().end(), name) !=
         config.transports().end();
}

// Makes `make`'s side of every listed, viable path of `registry`; `doing` and `without` word
// the log lines ("publisher: serving deltas over ucx (...)", "... not serving over nccl (...)").
template <typename Side, typename Make>
std::vector<std::unique_ptr<Side>> start_sides(const LivePathRegistry& registry,
                                               const LivePathRank& rank, const std::string& doing,
                                               const std::string& without, Make make) {
  std::vector<std::unique_ptr<Side>> sides;
  for (const auto& path : registry.paths()) {
    const std::string name = path->name();
    if (!listed(rank.config, name)) continue;
    Status viable = path->viable(rank.config);
    Result<std::unique_ptr<Side>> side = viable.ok() ? make(*path) : viable;
    if (!side.ok()) {
      if (rank.log) {
        rank.log(without + " " + name + " (" + side.status().message() +
                 "); versions go by the journal or another path");
      }
      continue;
    }
    if (rank.log) rank.log(doing + " " + (*side)->describe());
    sides.push_back(std::move(side).value());
  }
  return sides;
}

}  // namespace

Status check_live_delta_parts(const std::string& what, uint64_t version,
                              const proto::StepManifest& manifest,
                              const std::vector<std::string>& served) {
  if (manifest.version() != version ||
      static_cast<size_t>(manifest.parts_size()) + 1 != served.size()) {
    return data_loss(what + ": its manifest (version " + std::to_string(manifest.version()) + ", " +
                     std::to_string(manifest.parts_size()) + " parts) disagrees with the " +
                     std::to_string(served.size()) + " parts served");
  }
  for (size_t i = 1; i < served.size(); ++i) {
    if (served[i] != manifest.parts(static_cast<int>(i - 1)).file()) {
      return data_loss(what + ": served part '" + served[i] + "' is not the manifest's '" +
                       manifest.parts(static_cast<int>(i - 1)).file() + "'");
    }
  }
  return ok_status();
}

std::string memory_kinds_text(const std::vector<MemoryKind>& kinds) {
  std::string text;
  for (MemoryKind k : kinds) {
    text += text.empty() ? "" : ", ";
    text += k == MemoryKind::kCuda ? "cuda" : k == MemoryKind::kHostPinned ? "host-pinned" : "host";
  }
  return text.empty() ? "none" : text;
}

void LivePathRegistry::add(int priority, std::shared_ptr<const LivePath> path) {
  const std::string name = path->name();
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) { return e.path->name() == name; }),
                 entries_.end());
  entries_.push_back({priority, std::move(path)});
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.priority > b.priority; });
}

std::vector<std::shared_ptr<const LivePath>> LivePathRegistry::paths() const {
  std::vector<std::shared_ptr<const LivePath>> out;
  for (const auto& e : entries_) out.push_back(e.path);
  return out;
}

std::shared_ptr<const LivePath> LivePathRegistry::find(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e.path->name() == name) return e.path;
  }
  return nullptr;
}

std::shared_ptr<const LivePathRegistry> default_live_paths() {
  static const std::shared_ptr<const LivePathRegistry> registry = [] {
    auto r = std::make_shared<LivePathRegistry>();
    r->add(200, ucx_live_path());
    r->add(100, nccl_live_path());
    return std::shared_ptr<const LivePathRegistry>(std::move(r));
  }();
  return registry;
}

std::vector<std::unique_ptr<LivePathServer>> start_live_servers(const LivePathRegistry& registry,
                                                                const LivePathRank& rank) {
  return start_sides<LivePathServer>(registry, rank, "publisher: serving deltas over",
                                     "publisher: not serving over",
                                     [&](const LivePath& path) { return path.make_server(rank); });
}

std::vector<std::unique_ptr<LivePathFetcher>> start_live_fetchers(const LivePathRegistry& registry,
                                                                  const LivePathRank& rank) {
  return start_sides<LivePathFetcher>(
      registry, rank, "subscriber: can receive deltas over", "subscriber: cannot use",
      [&](const LivePath& path) { return path.make_fetcher(rank); });
}

}  // namespace weightcast
