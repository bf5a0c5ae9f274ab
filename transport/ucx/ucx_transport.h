// The UCX backend of the transport interface (transport.h, ARCHITECTURE.md §5): the publisher
// registers each part's memory (in place, or its copy in a shared segment) and leaves a
// version blob (ucx_version_blob.h) in a RendezvousStore; subscribers read parts with
// one-sided gets (ucp_get_nbx), or by loads from a segment mapped here, and verify them.
// The transports UCX picks (verbs, cuda_ipc, shm, tcp) come from UCX_TLS or the `tls` option.
//
// A publisher and a subscriber are separate objects with their own UCP context and worker;
// publish() is called on the former, latest/describe/fetch on the latter (the other calls
// return kFailedPrecondition).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"
#include "transport/ucx/rendezvous_store.h"
#include "transport/ucx/shared_segment.h"
#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_version_blob.h"

namespace weightcast {

// Store keys: one per readable version, and the newest version's blob.
inline constexpr const char* kUcxLatestKey = "latest";
std::string ucx_version_key(uint64_t version);  // "v/00000000000000000007"
VersionDescriptor ucx_descriptor(const UcxVersionBlob& blob);

struct UcxPublisherOptions {
  std::shared_ptr<RendezvousStore> store;
  std::string tls;  // overrides UCX_TLS for this object when not empty
  // Versions kept readable; publishing one more retires the oldest (its store entry is erased,
  // then its memory unmapped).
  size_t keep_versions = 2;
  // Where subscribers read from. kInPlace registers the caller's buffers (zero copy: RDMA
  // reads them where they are). kCopyToSharedMemory copies each version's parts into one
  // shared-memory segment of its own (shared_segment.h, a memfd), registered the same way for
  // gets: one copy per version on the publisher, after which the caller's buffers are free, and
  // a subscriber on this host maps the segment and reads by loads that need nothing from this
  // process. Over shm, in-place memory can only be read through this publisher's worker (gets
  // emulated over active messages or cma, at a fraction of memory bandwidth). Why the copies
  // are not UCX-allocated memory (UCP_MEM_MAP_ALLOCATE): shared_segment.h.
  enum class Memory { kInPlace, kCopyToSharedMemory };
  Memory memory = Memory::kInPlace;
};

// Zero-copy contract (Memory::kInPlace): publish() maps the parts' buffers where they are
// (ucp_mem_map, no copy). The caller keeps every part's bytes alive and unchanged until its version
// is retired (by the keep_versions window, close_worker() or the destructor); changed bytes reach
// subscribers as kDataLoss. A subscriber still reading a version being retired races with the
// caller reusing that memory (ucp_mem_unmap does not stop gets over shm or tcp, which the
// publisher's worker serves from its address space: reused bytes fail that fetch's check, freed
// memory would be read by the worker); the control plane's leases are what prevents that.
//
// A background thread progresses the worker (gets over tcp/shm are served by the publisher's
// worker), serialized with publish() by a mutex.
class UcxPublisherTransport final : public PartPublisher {
 public:
  // kInvalidArgument without a rendezvous store; UCX's error when it cannot make a context and
  // a worker here (no usable transport in options.tls, say).
  static Result<std::unique_ptr<UcxPublisherTransport>> create(UcxPublisherOptions options);
  ~UcxPublisherTransport() override;
  UcxPublisherTransport(const UcxPublisherTransport&) = delete;
  UcxPublisherTransport& operator=(const UcxPublisherTransport&) = delete;

  TransportInfo info() const override;
  Status publish(uint64_t version, std::span<const PartPayload> parts, Deadline deadline) override;

  // Retires every version and destroys the worker, as a lost connection would: the next
  // publish returns kIoError and every later one kUnavailable.
  void close_worker();

 private:
  struct Published {
    uint64_t version = 0;
    std::vector<ucp_mem_h> memhs;            // null for empty parts
    std::shared_ptr<SharedSegment> segment;  // Memory::kCopyToSharedMemory: the parts' copies
  };
  UcxPublisherTransport(UcxPublisherOptions options, UcxContextAndWorker created,
                        std::vector<uint8_t> worker_address);
  void progress_loop();
  // Takes `lock` (on mu_) by the deadline and checks the publisher is still usable.
  Status lock_for(std::unique_lock<std::timed_mutex>& lock, Deadline deadline,
                  const std::string& what);
  // publish() for Memory::kCopyToSharedMemory, after its checks of the arguments.
  Status publish_copies(uint64_t version, std::span<const PartPayload> parts, Deadline deadline,
                        const std::string& what);
  void unmap_all(const std::vector<ucp_mem_h>& memhs);
  // Registers every part where it is and publishes the blob; `segment` (null in place) holds
  // the parts' bytes when they are copies and is named in the blob.
  Status publish_locked(uint64_t version, std::span<const PartPayload> parts,
                        const std::vector<uint64_t>& hashes, std::shared_ptr<SharedSegment> segment,
                        Deadline deadline);
  void retire(const Published& p);  // erases the store entry, then unmaps

  UcxPublisherOptions options_;
  std::unique_ptr<UcxContext> context_;
  std::timed_mutex mu_;  // guards worker_ (UCX calls on it), published_, latest_
  std::unique_ptr<UcxWorker> worker_;
  std::vector<uint8_t> worker_address_;
  std::deque<Published> published_;
  // Memory::kCopyToSharedMemory: retired versions' copies, unmapped only keep_versions versions
  // later, so that a reader still busy with a just-retired version (a get over tcp, or about to
  // map its segment) finds memory that is still there. Their store entries are already erased.
  std::deque<Published> lingering_;
  // Then their addresses, kept mapped as read-only zeros (SharedSegment::
  // release_memory_keep_addresses) for kPlaceholderVersions more versions: a get over tcp
  // that arrives later still must not fault this process. One VMA and no memory each.
  static constexpr size_t kPlaceholderVersions = 1024;
  std::deque<std::shared_ptr<SharedSegment>> placeholders_;
  uint64_t latest_ = 0;
  bool has_latest_ = false;
  StickyError sticky_;
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

struct UcxSubscriberOptions {
  std::shared_ptr<RendezvousStore> store;
  std::string tls;
  size_t chunk_bytes = 4 << 20;  // one ucp_get_nbx per chunk
  size_t max_in_flight = 8;      // chunks requested and not yet completed
  // Where the publisher's memory is mapped into this process (its shared segment, when it
  // serves copies and this host, user and pid namespace are its own and the TLS list allows
  // shared memory; or wherever ucp_rkey_ptr succeeds), a get would be a copy by this thread
  // anyway; the part is then read by loads from the mapping in chunks of this size (rounded
  // down to whole KiB), and hashed in the same pass as it is copied (copying_hasher.h). The
  // deadline is checked between chunks. Each chunk costs a clock read and a call, so small
  // chunks cost throughput (docs/PERFORMANCE.md "UCX part fetch" has the figures per size).
  size_t mapped_chunk_bytes = 1 << 20;
  // Tests: called after each completed chunk with the bytes received so far.
  std::function<void(uint64_t done)> after_chunk;
};

// Thread-safe (calls are serialized). A connection error (the publisher died or closed) breaks
// the connection (later calls are kUnavailable); a corrupt part is kDataLoss naming it and is not;
// a version no longer in the store is kNotFound (the connection stays whole), and so is a fetch
// whose version was retired while it was read if the bytes read then fail their XXH3 (the memory
// was reused). Retiring does not interrupt a fetch over shm or tcp: one whose bytes still match
// returns ok, never ok with other bytes. Where unmapping revokes remote access (RDMA registrations)
// the gets may fail instead, as a connection error. A deadline is kDeadlineExceeded and does not
// break it (the endpoint is force-closed and the next fetch connects again).
class UcxSubscriberTransport final : public PartReader {
 public:
  // As UcxPublisherTransport::create.
  static Result<std::unique_ptr<UcxSubscriberTransport>> create(UcxSubscriberOptions options);
  ~UcxSubscriberTransport() override;
  UcxSubscriberTransport(const UcxSubscriberTransport&) = delete;
  UcxSubscriberTransport& operator=(const UcxSubscriberTransport&) = delete;

  TransportInfo info() const override;
  Result<VersionDescriptor> latest(Deadline deadline) override;
  Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) override;
  Status fetch(uint64_t version, const PartDescriptor& part, std::span<uint8_t> dest,
               Deadline deadline) override;
  // Bytes [offset, offset + dest.size()) of `part`, for a reader that needs one record of a
  // part: the part's XXH3 is not checked (the caller verifies what it read: a delta record's
  // own XXH3 trailer). Errors as fetch's.
  Status fetch_range(uint64_t version, const PartDescriptor& part, uint64_t offset,
                     std::span<uint8_t> dest, Deadline deadline);

  // Why the latest shared segments could not be mapped (reports), oldest first.
  std::vector<std::string> segment_failures() const {
    std::lock_guard lock(mu_);
    return {segment_failures_.begin(), segment_failures_.end()};
  }
  // Non-empty parts fetched so far by loads from a mapping and by gets (reports, tests).
  struct ReadCounts {
    uint64_t loads = 0;
    uint64_t gets = 0;
  };
  ReadCounts read_counts() const {
    return {loads_.load(std::memory_order_relaxed), gets_.load(std::memory_order_relaxed)};
  }

 private:
  struct Connection {
    std::vector<uint8_t> worker_address;
    ucp_ep_h ep = nullptr;
    ucs_status_t failure = UCS_OK;  // set by the error handler during progress
    // Unpacked rkeys by (version, part); destroyed before the endpoint.
    std::map<std::pair<uint64_t, std::string>, ucp_rkey_h> rkeys;
  };
  UcxSubscriberTransport(UcxSubscriberOptions options, UcxContextAndWorker created);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  // The store's blob for `version`, decoded; the last one decoded is kept and reused while the
  // store returns the same bytes (a fetch per part re-reads the store to see a retired or
  // republished version, but need not decode the same bytes again).
  Result<std::shared_ptr<const UcxVersionBlob>> load(uint64_t version);
  Status connect(const std::vector<uint8_t>& worker_address);
  void disconnect();  // force-closes the endpoint: outstanding gets complete as cancelled
  Result<ucp_rkey_h> rkey(uint64_t version, const UcxPartBlob& part);
  // fetch (`whole`) or fetch_range.
  Status read_part(uint64_t version, const PartDescriptor& part, uint64_t offset,
                   std::span<uint8_t> dest, bool whole, Deadline deadline);
  // Reads dest.size() bytes from `remote_address` (or `mapped`), checking their XXH3 when given.
  Status get_chunks(uint64_t remote_address, ucp_rkey_h rkey, std::span<uint8_t> dest,
                    std::optional<uint64_t> xxh3, Deadline deadline);
  Status read_mapped(const uint8_t* mapped, std::span<uint8_t> dest, std::optional<uint64_t> xxh3,
                     Deadline deadline);
  // The start of the blob's segment's data mapped here, or null (no segment, or one that
  // cannot be mapped from here: read through UCX); an error when the segment is gone.
  Result<const uint8_t*> mapped_segment(const UcxVersionBlob& blob, const std::string& what);

  UcxSubscriberOptions options_;
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;
  mutable std::mutex mu_;
  std::unique_ptr<Connection> conn_;
  bool map_segments_ = false;  // the TLS list allows shared memory
  struct Mapped {
    SharedSegmentLocator where;
    std::unique_ptr<MappedSegment> mapping;  // null: not mappable from here
  };
  std::map<uint64_t, Mapped> segments_;   // by version
  std::vector<uint8_t> last_blob_bytes_;  // what load() decoded last, under mu_
  std::shared_ptr<const UcxVersionBlob> last_blob_;
  std::deque<std::string> segment_failures_;
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> gets_{0};
  StickyError sticky_;
};

}  // namespace weightcast
