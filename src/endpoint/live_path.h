// The live paths of a rank group (docs/DECISIONS.md, "One live-path interface"): ways a
// version's delta travels from the publisher's memory to the live subscribers besides the
// journal, which stays the durable record of every version and the fallback of every failure.
//
// A path has a name ("ucx", "nccl": the names the group config's `transports` lists), says
// whether it can run on this host (LivePath::viable, after tensorpipe's isViable) and has two
// sides, two types: a LivePathServer in the publisher and a LivePathFetcher in each
// subscriber. The server serves a version's delta and returns an opaque descriptor (nixl's
// getPublicData); the Offer carries it keyed by the path's name (control.proto
// Offer.live_descriptors), the coordinator forwarding it without reading it to the subscribers
// whose Welcome lists the path; the fetcher turns it back into the delta (nixl's loadRemoteMD,
// then the reads). A subscriber tries its paths in its Welcome's order, then the journal.
//
// What travels is the delta as the journal stores it: the manifest, framed as the journal's
// MANIFEST file (kLiveManifestPart), then the manifest's part files in its order; the
// subscriber applies them with CatchUpReader::apply_delta_from, the journal path's checks
// (manifest limits, part sizes and XXH3, record headers, checksums). Both sides hand the bytes
// over in host memory today, whatever memory kinds the path moves them through; handing
// records over in device memory (for an engine that applies on the GPU) may come later.
//
// Paths are found in a LivePathRegistry (after tensorpipe's registerChannel(priority, name,
// context)); default_live_paths() holds ucx and nccl, and tests register stand-ins under the
// same names (nccl on the in-process loopback group).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"  // MemoryKind
#include "transport/fs/journal_writer.h"
#include "weightcast/control.pb.h"
#include "weightcast/group_config.pb.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// The name of the served manifest part.
inline constexpr const char* kLiveManifestPart = "MANIFEST";

// A version's delta as a live path delivered it, for CatchUpReader::apply_delta_from.
struct FetchedDelta {
  proto::StepManifest manifest;
  std::vector<std::vector<uint8_t>> parts;  // the manifest's part files' stored bytes, in order
  uint64_t bytes_read = 0;                  // bytes that crossed the path (manifest included)
};

// Checks a live delta's parts against its manifest (version `version`): `served` names the
// parts in the order they came, the manifest part first, then exactly the manifest's part
// files in its order. kDataLoss naming `what` otherwise. Every path's fetch runs it.
Status check_live_delta_parts(const std::string& what, uint64_t version,
                              const proto::StepManifest& manifest,
                              const std::vector<std::string>& served);

// "host, cuda": for logs and describe().
std::string memory_kinds_text(const std::vector<MemoryKind>& kinds);

// What one side of a path gets from its rank.
struct LivePathRank {
  uint32_t rank = 0;
  proto::GroupConfig config;  // the group's (its ucx, nccl, max_in_flight, timeouts)
  // To the coordinator (RankLink::send; any thread), for a path with control messages of its
  // own (NCCL's epoch reports).
  std::function<void(proto::Envelope)> send;
  std::function<void(const std::string&)> log;
};

// What both sides have. Every method may be called from any thread.
class LivePathSide {
 public:
  virtual ~LivePathSide() = default;
  virtual std::string name() const = 0;
  // For the rank's log: "ucx (UCX_TLS shm; memory kinds: host; serving in place)".
  virtual std::string describe() const = 0;
  // The memory kinds the path moves bytes through on this host (records are host memory).
  virtual std::vector<MemoryKind> memory_kinds() const = 0;
  // A control message the path owns (NCCL's NcclEpoch stages), shown to the path before the
  // rank handles it, on the rank link's thread (so it must not block); true when the message
  // was the path's alone. Default: none.
  virtual bool on_control_message(const proto::Envelope&) { return false; }
  // Stops the path at once, as a rank whose path died would: waits in it end with an error,
  // later serves and fetches fail (or return descriptors nothing answers). Idempotent; the
  // owner calls it before joining threads that may wait in the path. Default: nothing to stop.
  virtual void shutdown() {}
};

// The publisher's side.
class LivePathServer : public LivePathSide {
 public:
  // Serves `delta` as version `version` (versions increase) and returns the descriptor the
  // Offer carries; empty: this version is not served this time (NCCL without a ready epoch),
  // and its subscribers take their next path or the journal. The server may keep `delta`
  // (never writing it) while it serves the version; errors name the version and the path.
  [[nodiscard]] virtual Result<std::string> serve(uint64_t version,
                                                  std::shared_ptr<const DeltaInMemory> delta) = 0;
};

// The parts of one version that several publisher ranks serve (docs/DECISIONS.md "Several
// publisher ranks"), each from its own memory: an engine rank reads the records it needs from
// the ranks that own them. Used by one thread.
class LiveRankParts {
 public:
  virtual ~LiveRankParts() = default;
  // Bytes [offset, offset + bytes) of the committed step's part file `file`, from the rank that
  // serves it; nullopt when no rank serves that part on this path (the reader takes it from the
  // journal). The bytes are not verified here: a delta record carries its own XXH3. An error:
  // the path failed (the rank gone, its version retired, the deadline).
  [[nodiscard]] virtual Result<std::optional<std::vector<uint8_t>>> read(const std::string& file,
                                                                         uint64_t offset,
                                                                         uint64_t bytes) = 0;
  virtual uint64_t bytes_read() const = 0;  // bytes that crossed the path so far
};

// A subscriber's side.
class LivePathFetcher : public LivePathSide {
 public:
  // The rank parts of `version`: `shards` holds, per publisher rank that served its parts on
  // this path, its shard and this path's descriptor (Offer.shard_descriptors). Reads end by
  // `deadline`. Default: kUnimplemented (the path carries no rank parts).
  [[nodiscard]] virtual Result<std::unique_ptr<LiveRankParts>> open_rank_parts(
      uint64_t version, const std::vector<std::pair<uint32_t, std::string>>& shards,
      std::chrono::steady_clock::time_point deadline) {
    (void)version;
    (void)shards;
    (void)deadline;
    return Status(StatusCode::kUnimplemented, name() + " carries no publisher ranks' parts");
  }
  // An Offer for `version` carried this path's `descriptor` (the rank link's thread: must not
  // block). A path whose sender waits for every receiver (a collective) starts taking part
  // here, whether or not the version is fetched later. Default: nothing to do.
  virtual void on_offer(uint64_t version, const std::string& descriptor) {
    (void)version;
    (void)descriptor;
  }
  // The delta `descriptor` names, delivered by `deadline` (a path may give up earlier by its
  // own deadlines), its manifest checked as a journal manifest is and its parts against it
  // (check_live_delta_parts); their bytes are verified when applied. nullopt: the path does
  // not carry this version after all (NCCL: its round had no parts, or was forgotten), so the
  // subscriber tries its next path, or the journal. An error (the publisher gone, a version
  // retired, a corrupt part, the deadline): the path failed; the subscriber nacks, and its
  // recovery reads the journal.
  [[nodiscard]] virtual Result<std::optional<FetchedDelta>> fetch(
      uint64_t version, const std::string& descriptor,
      std::chrono::steady_clock::time_point deadline) = 0;
  // What the path keeps for versions up to `version` is no longer needed (they are held, or
  // a recovery reads them from the journal). Default: nothing kept.
  virtual void forget_through(uint64_t version) { (void)version; }
};

// A registered path: viability and the factories of its two sides.
class LivePath {
 public:
  virtual ~LivePath() = default;
  virtual std::string name() const = 0;
  // Whether this build and host can run the path for `config`'s group: ok, or an error
  // saying why not (no UCX in this build; no usable GPU or no loadable NCCL). A cheap check:
  // making a side may still fail, saying why, and the rank then goes without the path.
  [[nodiscard]] virtual Status viable(const proto::GroupConfig& config) const = 0;
  // Whether the path can serve one publisher rank's parts of a version (LivePathServer::serve
  // given that rank's fragment and parts) and read them back by range
  // (LivePathFetcher::open_rank_parts). A collective path (nccl) cannot.
  virtual bool carries_rank_parts() const { return false; }
  [[nodiscard]] virtual Result<std::unique_ptr<LivePathServer>> make_server(
      const LivePathRank& rank) const = 0;
  [[nodiscard]] virtual Result<std::unique_ptr<LivePathFetcher>> make_fetcher(
      const LivePathRank& rank) const = 0;
};

class LivePathRegistry {
 public:
  // Registers `path` under its name; a path of the same name is replaced (so tests put
  // stand-ins in place of the real ones). `priority` orders paths(): higher first.
  void add(int priority, std::shared_ptr<const LivePath> path);
  // Highest priority first: the order a rank starts its paths and lists them in its Hello.
  // Which path a subscriber tries first is the group config's `transports` order (Welcome).
  std::vector<std::shared_ptr<const LivePath>> paths() const;
  std::shared_ptr<const LivePath> find(std::string_view name) const;

 private:
  struct Entry {
    int priority = 0;
    std::shared_ptr<const LivePath> path;
  };
  std::vector<Entry> entries_;
};

// ucx (ucx_live.h) and nccl on make_nccl_groups (nccl_live_path.h).
std::shared_ptr<const LivePathRegistry> default_live_paths();

// The sides of the paths in `registry` that `rank.config`'s `transports` lists and that can
// run here, in registry order; each path started, or left out and why, is logged.
std::vector<std::unique_ptr<LivePathServer>> start_live_servers(const LivePathRegistry& registry,
                                                                const LivePathRank& rank);
std::vector<std::unique_ptr<LivePathFetcher>> start_live_fetchers(const LivePathRegistry& registry,
                                                                  const LivePathRank& rank);

}  // namespace weightcast
