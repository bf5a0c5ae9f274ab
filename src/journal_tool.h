// What the `weightcast journal` commands do, as functions the tests call too.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/base/status.h"
#include "transport/fs/catch_up_reader.h"
#include "transport/fs/journal_writer.h"

namespace weightcast {

// Destinations for every tensor of `manifest`, backed by `storage` (one buffer a tensor).
Result<std::vector<ReaderDestination>> destinations_for(const proto::StepManifest& manifest,
                                                        std::vector<std::vector<uint8_t>>* storage);

struct JournalPublishConfig {
  std::string root;
  uint64_t version = 0;
  std::string from;  // a safetensors file or an index json of shards
  uint64_t anchor_every = 10;
  bool force_anchor = false;
  size_t keep_anchors = 2;
  uint64_t part_bytes = uint64_t{64} << 20;
  uint64_t shard_bytes = uint64_t{1} << 30;
  size_t threads = 4;
  bool zstd = false;
  std::function<void(const std::string&)> log;
};

// Publishes the model file as `version`. For a delta the previous version is rebuilt from the
// journal itself (anchor + deltas, verified), so the command needs nothing but the new file.
Result<PublishReport> journal_publish(const JournalPublishConfig& config);

// HEAD, the steps on disk, and the leases (`version` unset), or one step's manifest.
Result<nlohmann::json> journal_inspect(const std::string& root, std::optional<uint64_t> version,
                                       bool tensors);

// Re-reads and checks everything: every committed step's manifest, every part's and extent's
// XXH3, every record, every anchor's safetensors headers and index; then replays from the
// oldest anchor to HEAD checking every tensor checksum. Returns one line per problem found
// (empty: all good); an error only when the journal cannot be read at all.
Result<std::vector<std::string>> journal_verify(const std::string& root, size_t threads,
                                                const std::function<void(const std::string&)>& log);

// Rebuilds `version` (default HEAD) and writes it as one safetensors file.
Status journal_materialize(const std::string& root, std::optional<uint64_t> version,
                           const std::string& out, size_t threads,
                           const std::function<void(const std::string&)>& log);

}  // namespace weightcast
