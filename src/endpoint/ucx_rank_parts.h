// The ucx live path's reads of a version several publisher ranks serve (src/endpoint/live_path.h
// LiveRankParts): each rank serves its own parts from its memory (ucx_live.h, one UCX worker per
// rank), and an engine rank reads the byte ranges of the records it needs straight from the
// ranks that own them, with one UCX connection per rank.
//
// A rank's descriptor is the UCX version blob of its parts (transport/ucx/ucx_version_blob.h),
// named as the committed step names them (transport/fs/rank_fragments.h merged_part_file). A
// part that two ranks claim is refused (kDataLoss naming it). After a connection error a rank's
// reader is rebuilt on the next version (a restarted rank has a new worker address).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/endpoint/live_path.h"

namespace weightcast {

class UcxRankReaders {
 public:
  explicit UcxRankReaders(std::string tls);
  ~UcxRankReaders();
  UcxRankReaders(const UcxRankReaders&) = delete;
  UcxRankReaders& operator=(const UcxRankReaders&) = delete;

  // As LivePathFetcher::open_rank_parts. The result reads through this object: it must not
  // outlive it, and one version is read at a time.
  Result<std::unique_ptr<LiveRankParts>> open(
      uint64_t version, const std::vector<std::pair<uint32_t, std::string>>& shards,
      std::chrono::steady_clock::time_point deadline);

  // Ranks this reader holds a connection to (tests).
  size_t connected_ranks() const;

  struct Reader;  // one rank's UCX subscriber transport and the store its blobs go through

 private:
  std::string tls_;
  std::map<uint32_t, std::unique_ptr<Reader>> readers_;  // by shard
};

}  // namespace weightcast
