// `weightcast bench ranks`: a model published through one journal by several publisher ranks
// (transport/fs/rank_publisher.h), each a process of its own holding only its FSDP-like shard
// (flat ranges cut at uneven points across tensor boundaries) or, with split "columns", its
// tensor-parallel blocks of columns of every tensor (boxes), against one publisher holding
// the whole model (JournalWriter) publishing the same versions in the same run.
//
// Figures, each beside its reference:
//  * per rank: its publisher's peak RSS beyond the trainer's own memory, against its shard's
//    bf16 bytes; the bytes it wrote per version against its own records;
//  * per delta version: rank 0's publish (its fragment, then waiting for every rank's and the
//    commit) against the single publisher's publish of the same version;
//  * per engine rank of two tensor-parallel layouts (rows, columns): the delta bytes it read
//    per version against the bytes of the records whose ranges its slices meet, and its
//    apply time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "codec/base/status.h"
#include "transport/fs/rank_publisher.h"

namespace weightcast {

struct RanksBenchmarkConfig {
  std::string dir = "/tmp";  // scratch journals are made (and removed) in it
  uint64_t parameters = uint64_t{1} << 28;
  uint64_t tensors = 16;
  uint32_t ranks = 4;
  uint64_t versions = 6;  // version 0 (an anchor) and deltas 1 .. versions - 1
  double density = 0.01;
  // RankPublisherOptions::piece_elements (0: one range record per owned range).
  uint64_t piece_elements = RankPublisherOptions{}.piece_elements;
  // "flat": FSDP-like ranges; "columns": each rank a block of columns of every tensor (a
  // tensor-parallel trainer's shards, published as boxes).
  std::string split = "flat";
  std::function<void(const std::string&)> log;
};

Result<nlohmann::json> run_ranks_benchmark(const RanksBenchmarkConfig& config);

}  // namespace weightcast
