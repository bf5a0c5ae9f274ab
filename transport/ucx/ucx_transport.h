// The UCX backend of the Transport interface (transport.h, DESIGN §5): the publisher
// registers each part's memory in place and leaves a version blob (ucx_version_blob.h) in a
// RendezvousStore; subscribers read parts with one-sided gets (ucp_get_nbx) and verify them.
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
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"
#include "transport/ucx/pipelined_hasher.h"
#include "transport/ucx/rendezvous_store.h"
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
  // Where subscribers read from. kInPlace maps the caller's buffers (zero copy: RDMA reads
  // them where they are). kCopyToUcxMemory copies each part into memory UCX allocates
  // (ucp_mem_map with UCP_MEM_MAP_ALLOCATE): one copy per version on the publisher, after which
  // the caller's buffers are free, and shared-memory transports (posix, sysv) map that memory
  // into the subscriber, whose gets become plain loads that need no help from this process.
  // Over shm, in-place memory can only be read through this publisher's worker (gets emulated
  // over active messages, two copies and two busy processes per transfer).
  // Hazard (why kInPlace is the default and the live path's choice): with UCX 1.13, a
  // subscriber unpacking the rkey of a copy whose memory is already gone (version retired,
  // publisher closed or dead) crashes inside ucp_ep_rkey_unpack (its error path destroys a
  // half-built rkey); a subscriber must not hold such a version's blob. docs/DECISIONS.md.
  enum class Memory { kInPlace, kCopyToUcxMemory };
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
class UcxPublisherTransport final : public Transport {
 public:
  explicit UcxPublisherTransport(UcxPublisherOptions options);
  ~UcxPublisherTransport() override;

  TransportInfo info() const override;
  Status publish(uint64_t version, std::span<const PartPayload> parts, Deadline deadline) override;
  Result<VersionDescriptor> latest(Deadline deadline) override;
  Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) override;
  Status fetch(uint64_t version, const PartDescriptor& part, std::span<uint8_t> dest,
               Deadline deadline) override;

  // Retires every version and destroys the worker, as a lost connection would: every later
  // publish returns a sticky kIoError.
  void close_worker();

 private:
  struct Published {
    uint64_t version = 0;
    std::vector<ucp_mem_h> memhs;  // null for empty parts
  };
  void progress_loop();
  // Takes `lock` (on mu_) by the deadline and checks the publisher is still usable.
  Status lock_for(std::unique_lock<std::timed_mutex>& lock, Deadline deadline,
                  const std::string& what);
  // publish() for Memory::kCopyToUcxMemory, after its checks of the arguments.
  Status publish_copies(uint64_t version, std::span<const PartPayload> parts, Deadline deadline,
                        const std::string& what);
  // Memory::kCopyToUcxMemory: allocates one UCX buffer per non-empty part (null for empty
  // ones), under mu_.
  Result<std::vector<ucp_mem_h>> allocate_locked(std::span<const PartPayload> parts,
                                                 const std::string& what);
  void unmap_all(const std::vector<ucp_mem_h>& memhs);
  // `memhs`: the parts' memory already mapped (copies), or empty to map the parts in place.
  // Takes ownership of `memhs` (unmapped on failure).
  Status publish_locked(uint64_t version, std::span<const PartPayload> parts,
                        const std::vector<uint64_t>& hashes, std::vector<ucp_mem_h> memhs,
                        Deadline deadline);
  void retire(const Published& p);  // erases the store entry, then unmaps

  UcxPublisherOptions options_;
  Status init_error_ = ok_status();
  std::unique_ptr<UcxContext> context_;
  std::timed_mutex mu_;  // guards worker_ (UCX calls on it), published_, latest_
  std::unique_ptr<UcxWorker> worker_;
  std::vector<uint8_t> worker_address_;
  std::deque<Published> published_;
  // Memory::kCopyToUcxMemory: retired versions' copies, unmapped only keep_versions versions
  // later, so that a reader still busy with a just-retired version (or about to unpack its
  // rkey) finds memory that is still there. Their store entries are already erased.
  std::deque<Published> lingering_;
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
  // Where UCX maps the publisher's memory into this process (shared-memory transports and a
  // publisher serving from UCX-allocated memory: ucp_rkey_ptr succeeds), a get would be a copy
  // by this thread anyway; the part is then read by loads from the mapping in chunks of this
  // size, and a helper thread (pipelined_hasher.h) hashes each chunk behind the copy.
  size_t mapped_chunk_bytes = 64 << 10;
  // Tests: called after each completed chunk with the bytes received so far.
  std::function<void(uint64_t done)> after_chunk;
};

// Thread-safe (calls are serialized). A connection error (the publisher died or closed) is
// sticky; a corrupt part is kDataLoss naming it and is not; a version no longer in the store is
// kNotFound (not sticky), and so is a fetch whose version was retired while it was read if the
// bytes read then fail their XXH3 (the memory was reused). Retiring does not interrupt a fetch
// over shm or tcp: one whose bytes still match returns ok, never ok with other bytes. Where
// unmapping revokes remote access (RDMA registrations) the gets may fail instead, as a
// connection error. A deadline is kDeadlineExceeded, not sticky (the endpoint is force-closed
// and the next fetch connects again).
class UcxSubscriberTransport final : public Transport {
 public:
  explicit UcxSubscriberTransport(UcxSubscriberOptions options);
  ~UcxSubscriberTransport() override;

  TransportInfo info() const override;
  Status publish(uint64_t version, std::span<const PartPayload> parts, Deadline deadline) override;
  Result<VersionDescriptor> latest(Deadline deadline) override;
  Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) override;
  Status fetch(uint64_t version, const PartDescriptor& part, std::span<uint8_t> dest,
               Deadline deadline) override;

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
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  Result<UcxVersionBlob> load(uint64_t version);
  Status connect(const std::vector<uint8_t>& worker_address);
  void disconnect();  // force-closes the endpoint: outstanding gets complete as cancelled
  Result<ucp_rkey_h> rkey(uint64_t version, const UcxPartBlob& part);
  Status get_chunks(const UcxPartBlob& part, ucp_rkey_h rkey, std::span<uint8_t> dest,
                    Deadline deadline);
  Status read_mapped(const UcxPartBlob& part, const uint8_t* mapped, std::span<uint8_t> dest,
                     Deadline deadline);

  UcxSubscriberOptions options_;
  Status init_error_ = ok_status();
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;
  std::mutex mu_;
  std::unique_ptr<Connection> conn_;
  std::unique_ptr<PipelinedHasher> hasher_;  // created at the first fetch of mapped memory
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> gets_{0};
  StickyError sticky_;
};

}  // namespace weightcast
