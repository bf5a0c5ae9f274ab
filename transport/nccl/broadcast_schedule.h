// The NCCL transport's schedule (ARCHITECTURE.md §5): which bytes go in which broadcast.
//
// A version's parts are broadcast by the rank that owns each part, in the order the manifest
// fixes, through fixed-size buckets: every rank walks the same schedule, so a broadcast's root
// and size are known to all ranks without another message. Rules:
//   * parts are taken in manifest order; a bucket holds bytes of one root only (one
//     ncclBroadcast has one root), so a change of owner starts a new bucket;
//   * a part is split across buckets when it does not fit in what is left of one (buckets are
//     filled, so a bucket carries at most bucket_bytes and only the last bucket of a root's run
//     is short);
//   * bucket k uses staging buffer k % buffers, so receiving bucket k + 1 overlaps applying
//     bucket k (two buffers by default).
// Pure: no NCCL, no CUDA; the transport and its tests share it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace weightcast::nccl {

struct SchedulePart {
  std::string name;  // for errors
  uint64_t bytes = 0;
  int owner = 0;  // the rank that holds the part and broadcasts it
};

// A run of one part's bytes inside a bucket.
struct BucketSegment {
  uint32_t part = 0;           // index into the input parts
  uint64_t part_offset = 0;    // first byte of the part in this segment
  uint64_t bucket_offset = 0;  // where it lies in the bucket
  uint64_t bytes = 0;
};

struct Bucket {
  int root = 0;
  uint32_t buffer = 0;  // staging buffer index
  uint64_t bytes = 0;   // sum of its segments
  std::vector<BucketSegment> segments;
};

struct ScheduleOptions {
  uint64_t bucket_bytes = uint64_t{1} << 30;
  uint32_t buffers = 2;
  int ranks = 1;  // owners must be in [0, ranks)
};

struct BroadcastSchedule {
  std::vector<Bucket> buckets;
  uint64_t total_bytes = 0;
};

// Errors name the part: an owner outside the communicator, or options that cannot work.
Result<BroadcastSchedule> plan_broadcasts(const std::vector<SchedulePart>& parts,
                                          const ScheduleOptions& options);

}  // namespace weightcast::nccl
