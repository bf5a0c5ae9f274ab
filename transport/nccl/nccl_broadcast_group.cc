#include "transport/nccl/nccl_broadcast_group.h"

#include "transport/nccl/cuda_status.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace weightcast::nccl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kStagingAlign = 256;

// What is left of `deadline`, never negative.
std::chrono::milliseconds time_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

std::string part_name(std::span<const SchedulePart> parts, size_t i) {
  return "part " + std::to_string(i) + " '" + parts[i].name + "' (" +
         std::to_string(parts[i].bytes) + " bytes, owner rank " + std::to_string(parts[i].owner) +
         ")";
}

// Device memory the broadcaster can use in place (device, on the group's device, or managed),
// else host memory (pageable, pinned or registered) to stage.
Result<bool> is_device_memory(const void* p, int device, const std::string& who) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // older runtimes fail on plain host memory: that is what it is
    return false;
  }
  if (a.type == cudaMemoryTypeManaged) return true;
  if (a.type != cudaMemoryTypeDevice) return false;
  if (a.device != device) {
    return invalid_argument(who + " is device memory of cuda:" + std::to_string(a.device) +
                            ", not of the group's cuda:" + std::to_string(device));
  }
  return true;
}

}  // namespace

struct NcclBroadcastGroup::Placement {
  // A part's bytes staged in the round's device allocation at `offset`: copied in from the
  // owner's host source before the schedule runs, and/or out to a host destination after.
  struct Staged {
    uint32_t part = 0;
    uint64_t offset = 0;
    bool in = false, out = false;
  };
  std::vector<PartBuffers> buffers;  // device pointers; staged ones filled once allocated
  std::vector<Staged> staged;
  uint64_t staging_bytes = 0;

  uint64_t reserve(uint64_t bytes) {
    const uint64_t at = staging_bytes;
    staging_bytes += (bytes + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
    return at;
  }
};

NcclBroadcastGroup::NcclBroadcastGroup(std::unique_ptr<NcclCommunicator> comm,
                                       NcclBroadcastGroupOptions options)
    : options_(options), comm_(std::move(comm)) {}

NcclBroadcastGroup::~NcclBroadcastGroup() {
  // No round is in progress (its owner destroys the group). The broadcaster first: it still
  // points at the communicator, and it waits for its streams (idle, or ended by the abort).
  caster_.reset();
  cudaSetDevice(options_.device);
  if (copy_stream_ != nullptr) {
    cudaStreamSynchronize(copy_stream_);
    cudaStreamDestroy(copy_stream_);
  }
  if (copied_ != nullptr) cudaEventDestroy(copied_);
  if (kept_staging_ != nullptr) cudaFree(kept_staging_);
  comm_.reset();
}

std::string NcclBroadcastGroup::who() const {
  return "nccl group of " + std::to_string(size()) + ", rank " + std::to_string(rank()) +
         " (cuda:" + std::to_string(options_.device) + ")";
}

Status NcclBroadcastGroup::broadcast(std::span<const SchedulePart> parts,
                                     std::span<const std::span<const uint8_t>> sources,
                                     std::span<const std::span<uint8_t>> destinations,
                                     Deadline deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) {
      return unavailable(who() + ": broken by an earlier failure: " + failure_.to_string());
    }
    if (busy_) {
      // Another thread's round holds the communicator: it performs the abort.
      failure_ = failed_precondition(who() + ": broadcast() called while another is in progress");
      comm_->request_abort(failure_.message());
      return failure_;
    }
    busy_ = true;
  }
  const Status s = run_round(parts, sources, destinations, deadline);
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
  if (!s.ok() && failure_.ok()) failure_ = s;
  if (failure_.ok()) return ok_status();
  // A failed round (or an abort() that arrived during it) leaves no work of ours queued.
  if (!comm_->aborted()) comm_->abort(failure_.message());
  return failure_;
}

void NcclBroadcastGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.ok()) failure_ = io_error(who() + ": group aborted: " + why);
  if (busy_) {
    comm_->request_abort(why);  // the broadcasting thread aborts at its next poll
  } else if (!comm_->aborted()) {
    comm_->abort(why);  // no other thread uses the communicator: abort here
  }
}

Status NcclBroadcastGroup::place(std::span<const SchedulePart> parts,
                                 std::span<const std::span<const uint8_t>> sources,
                                 std::span<const std::span<uint8_t>> destinations, Placement* out) {
  out->buffers.assign(parts.size(), PartBuffers{});
  for (uint32_t i = 0; i < parts.size(); ++i) {
    const SchedulePart& p = parts[i];
    const auto src = sources[i];
    const auto dst = destinations[i];
    const bool owner = p.owner == rank();
    if (!src.empty() && !owner) {
      return invalid_argument(who() + ": " + part_name(parts, i) +
                              " has a source here, but only its owner passes one");
    }
    if (!src.empty() && src.size() != p.bytes) {
      return invalid_argument(who() + ": " + part_name(parts, i) + " has a source of " +
                              std::to_string(src.size()) + " bytes");
    }
    if (src.empty() && owner && p.bytes > 0) {
      return invalid_argument(who() + ": " + part_name(parts, i) +
                              " has no source on its owner (this rank)");
    }
    if (!dst.empty() && dst.size() != p.bytes) {
      return invalid_argument(who() + ": " + part_name(parts, i) + " has a destination of " +
                              std::to_string(dst.size()) + " bytes");
    }
    if (p.bytes == 0) continue;  // nothing to move; the broadcaster skips it
    PartBuffers& b = out->buffers[i];
    int staged_source = -1;  // index into out->staged
    if (!src.empty()) {
      ASSIGN_OR_RETURN(const bool dev,
                       is_device_memory(src.data(), options_.device,
                                        who() + ": the source of " + part_name(parts, i)));
      if (dev) {
        b.source = src.data();
      } else {
        staged_source = static_cast<int>(out->staged.size());
        out->staged.push_back({i, out->reserve(p.bytes), true, false});
      }
    }
    if (!dst.empty()) {
      ASSIGN_OR_RETURN(const bool dev,
                       is_device_memory(dst.data(), options_.device,
                                        who() + ": the destination of " + part_name(parts, i)));
      if (dev) {
        b.destination = dst.data();
      } else if (staged_source >= 0) {
        // The owner's staged source is already the part's bytes on the device: the broadcaster
        // skips a destination equal to the source, and it is copied out from there.
        out->staged[staged_source].out = true;
      } else {
        out->staged.push_back({i, out->reserve(p.bytes), false, true});
      }
    }
  }
  return ok_status();
}

Status NcclBroadcastGroup::run_round(std::span<const SchedulePart> parts,
                                     std::span<const std::span<const uint8_t>> sources,
                                     std::span<const std::span<uint8_t>> destinations,
                                     Deadline deadline) {
  // An empty list stands for an empty span per part (broadcast_group.h): the round framing's
  // root passes no destinations, a receiver no sources.
  const std::vector<std::span<const uint8_t>> no_sources(sources.empty() ? parts.size() : 0);
  const std::vector<std::span<uint8_t>> no_destinations(destinations.empty() ? parts.size() : 0);
  if (sources.empty()) sources = no_sources;
  if (destinations.empty()) destinations = no_destinations;
  if (sources.size() != parts.size() || destinations.size() != parts.size()) {
    return invalid_argument(who() + ": " + std::to_string(parts.size()) + " parts, but " +
                            std::to_string(sources.size()) + " sources and " +
                            std::to_string(destinations.size()) + " destinations");
  }
  ScheduleOptions so;
  so.bucket_bytes = options_.bucket_bytes;
  so.buffers = options_.buffers;
  so.ranks = size();
  auto schedule = plan_broadcasts(std::vector<SchedulePart>(parts.begin(), parts.end()), so);
  if (!schedule.ok()) return schedule.status().with_context(who());
  Placement pl;
  RETURN_IF_ERROR(place(parts, sources, destinations, &pl));
  if (Clock::now() >= deadline) {
    return deadline_exceeded(who() + ": the round's deadline passed before it started");
  }

  WC_NCCL_CUDA(cudaSetDevice(options_.device), who());
  if (caster_ == nullptr) {
    WC_NCCL_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), who());
    WC_NCCL_CUDA(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), who());
    ASSIGN_OR_RETURN(
        caster_, BucketBroadcaster::create(comm_.get(), options_.bucket_bytes, options_.buffers));
  }

  uint8_t* staging = nullptr;
  if (pl.staging_bytes > 0) {
    void* p = nullptr;
    WC_NCCL_CUDA(cudaMalloc(&p, pl.staging_bytes),
                 who() + " staging " + std::to_string(pl.staging_bytes) + " bytes of host parts");
    staging = static_cast<uint8_t*>(p);
    for (const Placement::Staged& st : pl.staged) {
      PartBuffers& b = pl.buffers[st.part];
      if (st.in) b.source = staging + st.offset;
      if (st.out) b.destination = staging + st.offset;
    }
  }
  // Copies between host parts and the staging allocation, on the copy stream, waited for with
  // the round's deadline (and any abort request) like the broadcasts.
  auto copy = [&](bool in) -> Status {
    bool any = false;
    for (const Placement::Staged& st : pl.staged) {
      if (in ? !st.in : !st.out) continue;
      const uint64_t n = parts[st.part].bytes;
      const std::string what =
          who() + (in ? ": staging the source of " : ": copying out ") + part_name(parts, st.part);
      if (in) {
        WC_NCCL_CUDA(cudaMemcpyAsync(staging + st.offset, sources[st.part].data(), n,
                                     cudaMemcpyHostToDevice, copy_stream_),
                     what);
      } else {
        WC_NCCL_CUDA(cudaMemcpyAsync(destinations[st.part].data(), staging + st.offset, n,
                                     cudaMemcpyDeviceToHost, copy_stream_),
                     what);
      }
      any = true;
    }
    if (!any) return ok_status();
    WC_NCCL_CUDA(cudaEventRecord(copied_, copy_stream_), who());
    const Status s = comm_->wait(copied_, deadline);
    return s.ok() ? s : s.with_context(in ? "staging host sources" : "copying out to host");
  };

  Status s = copy(true);
  if (s.ok()) {
    s = caster_->run(
        *schedule, pl.buffers, [](uint32_t) { return ok_status(); }, time_left(deadline));
  }
  if (s.ok()) s = copy(false);
  // A failed wait leaves no staging copy touching the caller's host memory after we return (the
  // copy stream never waits on NCCL, so this is bounded by the copies themselves).
  if (!s.ok() && copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  if (staging != nullptr) {
    if (s.ok()) {
      cudaFree(staging);  // every copy of the round is done
    } else if (kept_staging_ == nullptr) {
      kept_staging_ = staging;  // an aborted copy may still touch it: freed with the group
    } else {
      cudaFree(staging);  // a second failed round cannot have run (sticky): never used
    }
  }
  return s;
}

Result<std::string> NcclBroadcastGroupFactory::make_id() {
  ASSIGN_OR_RETURN(const ncclUniqueId id, NcclCommunicator::make_id());
  return std::string(id.internal, sizeof(id.internal));
}

Result<std::unique_ptr<BroadcastGroup>> NcclBroadcastGroupFactory::join(const std::string& id,
                                                                        int ranks, int rank,
                                                                        Deadline deadline) {
  const std::string who = "nccl group of " + std::to_string(ranks) + ", rank " +
                          std::to_string(rank) + " (cuda:" + std::to_string(options_.device) + ")";
  ncclUniqueId uid{};
  if (id.size() != sizeof(uid.internal)) {
    return invalid_argument(who + ": the group id has " + std::to_string(id.size()) +
                            " bytes, an ncclUniqueId has " + std::to_string(sizeof(uid.internal)) +
                            " (was it made by the nccl factory?)");
  }
  if (options_.bucket_bytes == 0 || options_.buffers == 0) {
    return invalid_argument(who + ": bucket_bytes (" + std::to_string(options_.bucket_bytes) +
                            ") and buffers (" + std::to_string(options_.buffers) +
                            ") must be positive");
  }
  std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
  ASSIGN_OR_RETURN(auto comm,
                   NcclCommunicator::join(uid, ranks, rank, options_.device, time_left(deadline)));
  return std::unique_ptr<BroadcastGroup>(new NcclBroadcastGroup(std::move(comm), options_));
}

}  // namespace weightcast::nccl
