#include "transport/nccl/broadcast_schedule.h"

#include <algorithm>

namespace weightcast::nccl {

Result<BroadcastSchedule> plan_broadcasts(const std::vector<SchedulePart>& parts,
                                          const ScheduleOptions& o) {
  if (o.bucket_bytes == 0) return invalid_argument("nccl schedule: bucket size must be positive");
  if (o.buffers == 0) return invalid_argument("nccl schedule: at least one buffer is needed");
  if (o.ranks <= 0) return invalid_argument("nccl schedule: the communicator has no ranks");
  BroadcastSchedule s;
  Bucket* open = nullptr;  // the bucket being filled
  for (size_t i = 0; i < parts.size(); ++i) {
    const SchedulePart& p = parts[i];
    if (p.owner < 0 || p.owner >= o.ranks) {
      return invalid_argument("nccl schedule: part '" + p.name + "' is owned by rank " +
                              std::to_string(p.owner) + ", outside the communicator's " +
                              std::to_string(o.ranks) + " ranks");
    }
    uint64_t done = 0;
    while (done < p.bytes) {
      if (open == nullptr || open->root != p.owner || open->bytes == o.bucket_bytes) {
        Bucket b;
        b.root = p.owner;
        b.buffer = static_cast<uint32_t>(s.buckets.size() % o.buffers);
        s.buckets.push_back(std::move(b));
        open = &s.buckets.back();
      }
      const uint64_t n = std::min(p.bytes - done, o.bucket_bytes - open->bytes);
      open->segments.push_back({static_cast<uint32_t>(i), done, open->bytes, n});
      open->bytes += n;
      done += n;
    }
    s.total_bytes += p.bytes;
  }
  return s;
}

}  // namespace weightcast::nccl
