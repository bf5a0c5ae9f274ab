// UcxSubscriberTransport (ucx_transport.h): blobs from the store, parts by one-sided gets.
#include <xxhash.h>
// The library's runtime-dispatched XXH3 (AVX2 where the CPU has it, same hash values): ~2.5x
// the default SSE2 build on data in cache, and verification is on every fetch's path.
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <memory>
#include <set>
#include <thread>

#include "transport/ucx/copying_hasher.h"
#include "transport/ucx/ucx_transport.h"

namespace weightcast {
namespace {

Status check_deadline(Deadline deadline, const std::string& what) {
  if (std::chrono::steady_clock::now() > deadline)
    return deadline_exceeded(what + ": deadline passed");
  return ok_status();
}

// Unpacked rkeys kept per connection; the oldest versions' are dropped beyond this.
constexpr size_t kMaxCachedRkeys = 256;

// Versions whose shared segments stay mapped (and failures remembered); older ones are unmapped.
constexpr size_t kMaxMappedSegments = 4;

// Whether a UCX_TLS-style list lets this subscriber read through shared memory: not when it
// names transports and none of them is a shared-memory one (or, as "^...", excludes them).
bool tls_allows_shared_memory(std::string tls) {
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env != nullptr ? env : "";
  }
  if (tls.empty()) return true;
  const bool exclude = tls.front() == '^';
  if (exclude) tls.erase(0, 1);
  static const std::set<std::string> kShared = {"all", "sm", "shm", "posix", "sysv", "mm"};
  bool named = false;
  size_t from = 0;
  while (from <= tls.size()) {
    const size_t comma = std::min(tls.find(',', from), tls.size());
    if (kShared.count(tls.substr(from, comma - from)) > 0) named = true;
    from = comma + 1;
  }
  return exclude ? !named : named;
}

}  // namespace

Result<std::unique_ptr<UcxSubscriberTransport>> UcxSubscriberTransport::create(
    UcxSubscriberOptions options) {
  if (!options.store) return invalid_argument("ucx subscriber: no rendezvous store given");
  if (options.chunk_bytes == 0) options.chunk_bytes = 4 << 20;
  if (options.max_in_flight == 0) options.max_in_flight = 1;
  ASSIGN_OR_RETURN(UcxContextAndWorker created, create_ucx_context_and_worker(options.tls));
  return std::unique_ptr<UcxSubscriberTransport>(
      new UcxSubscriberTransport(std::move(options), std::move(created)));
}

UcxSubscriberTransport::UcxSubscriberTransport(UcxSubscriberOptions options,
                                               UcxContextAndWorker created)
    : options_(std::move(options)),
      context_(std::move(created.context)),
      worker_(std::move(created.worker)),
      map_segments_(tls_allows_shared_memory(options_.tls)) {}

UcxSubscriberTransport::~UcxSubscriberTransport() {
  std::lock_guard lock(mu_);
  disconnect();
}

TransportInfo UcxSubscriberTransport::info() const {
  return ucx_transport_info(*context_);
}

Result<VersionDescriptor> UcxSubscriberTransport::latest(Deadline deadline) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(sticky_.check());
  RETURN_IF_ERROR(check_deadline(deadline, "ucx latest"));
  auto stored = options_.store->get(kUcxLatestKey);
  if (!stored.ok()) return sticky_.record(stored.status());
  if (!*stored) return not_found("ucx: no version is published");
  ASSIGN_OR_RETURN(auto blob, decode_ucx_version_blob(**stored));
  return ucx_descriptor(blob);
}

Result<VersionDescriptor> UcxSubscriberTransport::describe(uint64_t version, Deadline deadline) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(sticky_.check());
  RETURN_IF_ERROR(check_deadline(deadline, "ucx describe of version " + std::to_string(version)));
  ASSIGN_OR_RETURN(auto blob, load(version));
  return ucx_descriptor(*blob);
}

Result<std::shared_ptr<const UcxVersionBlob>> UcxSubscriberTransport::load(uint64_t version) {
  auto stored = options_.store->get(ucx_version_key(version));
  if (!stored.ok()) return sticky_.record(stored.status());
  if (!*stored) return not_found("ucx: version " + std::to_string(version) + " is not published");
  if (last_blob_ != nullptr && last_blob_->version == version && **stored == last_blob_bytes_) {
    return last_blob_;
  }
  ASSIGN_OR_RETURN(auto blob, decode_ucx_version_blob(**stored));
  if (blob.version != version) {
    return data_loss("ucx: the store's entry for version " + std::to_string(version) +
                     " describes version " + std::to_string(blob.version));
  }
  last_blob_ = std::make_shared<const UcxVersionBlob>(std::move(blob));
  last_blob_bytes_ = std::move(**stored);
  return last_blob_;
}

Status UcxSubscriberTransport::fetch(uint64_t version, const PartDescriptor& part,
                                     std::span<uint8_t> dest, Deadline deadline) {
  return read_part(version, part, 0, dest, true, deadline);
}

Status UcxSubscriberTransport::fetch_range(uint64_t version, const PartDescriptor& part,
                                           uint64_t offset, std::span<uint8_t> dest,
                                           Deadline deadline) {
  return read_part(version, part, offset, dest, false, deadline);
}

Status UcxSubscriberTransport::read_part(uint64_t version, const PartDescriptor& part,
                                         uint64_t offset, std::span<uint8_t> dest, bool whole,
                                         Deadline deadline) {
  const std::string what = "ucx fetch of part '" + part.name + "' of version " +
                           std::to_string(version) +
                           (whole ? std::string() : " at offset " + std::to_string(offset));
  std::unique_lock lock(mu_);
  RETURN_IF_ERROR(sticky_.check());
  RETURN_IF_ERROR(check_deadline(deadline, what));
  if (whole ? dest.size() != part.bytes
            : offset > part.bytes || dest.size() > part.bytes - offset) {
    return invalid_argument(what + ": " + std::to_string(dest.size()) +
                            " bytes do not fit the part's " + std::to_string(part.bytes));
  }
  ASSIGN_OR_RETURN(const auto loaded, load(version));
  const UcxVersionBlob& blob = *loaded;
  const UcxPartBlob* p = nullptr;
  for (const auto& candidate : blob.parts) {
    if (candidate.name == part.name) p = &candidate;
  }
  if (p == nullptr) return not_found(what + ": no such part");
  if (p->bytes != part.bytes || p->xxh3 != part.xxh3) {
    return invalid_argument(what + ": the descriptor does not match the published part");
  }
  Status got = ok_status();
  const uint8_t* in_segment = nullptr;
  if (p->bytes > 0) {
    auto mapped = mapped_segment(blob, what);
    // The publisher's exit is a connection error (sticky), a closed segment is not.
    if (!mapped.ok() && mapped.status().code() == StatusCode::kIoError) {
      return sticky_.record(mapped.status());
    }
    if (!mapped.ok()) return mapped.status();
    in_segment = *mapped;
  }
  const std::optional<uint64_t> expected = whole ? std::optional<uint64_t>(p->xxh3) : std::nullopt;
  if (in_segment != nullptr) {
    loads_.fetch_add(1, std::memory_order_relaxed);
    got = read_mapped(in_segment + p->segment_offset + offset, dest, expected, deadline)
              .with_context(what);
  } else if (p->bytes > 0) {
    RETURN_IF_ERROR(sticky_.record(connect(blob.worker_address)));
    auto rk = rkey(version, *p);
    if (!rk.ok()) return sticky_.record(rk.status());
    void* mapped = nullptr;
    if (ucp_rkey_ptr(*rk, p->remote_address, &mapped) == UCS_OK) {
      loads_.fetch_add(1, std::memory_order_relaxed);
      got = read_mapped(static_cast<const uint8_t*>(mapped) + offset, dest, expected, deadline)
                .with_context(what);
    } else {
      gets_.fetch_add(1, std::memory_order_relaxed);
      got = sticky_.record(
          get_chunks(p->remote_address + offset, *rk, dest, expected, deadline).with_context(what));
    }
  } else if (whole && XXH3_64bits(dest.data(), 0) != p->xxh3) {
    got = data_loss(what + ": the bytes read do not match their XXH3");
  }
  if (got.code() != StatusCode::kDataLoss) return got;
  // A version retired while it was read may show its memory's next contents: not found, not
  // corruption, as long as the store no longer offers it.
  auto again = options_.store->get(ucx_version_key(version));
  if (again.ok() && !*again) return not_found(what + ": the version was retired during the fetch");
  return got;
}

// Segments are mapped once per version and kept for the newest few. A segment that cannot be
// mapped from here (another host or pid namespace, no permission) is remembered as such (null)
// and the version read through UCX; one that is gone is an error, since UCX could not read it
// either (and, over shm, an endpoint to a closed worker costs UCX 1.13 a leak). A blob naming
// another segment for a cached version (a restarted publisher) maps again.
Result<const uint8_t*> UcxSubscriberTransport::mapped_segment(const UcxVersionBlob& blob,
                                                              const std::string& what) {
  if (!blob.has_segment || !map_segments_) return nullptr;
  auto it = segments_.find(blob.version);
  const SharedSegmentLocator& where = blob.segment;
  if (it != segments_.end() && it->second.where != where) {
    segments_.erase(it);
    it = segments_.end();
  }
  if (it == segments_.end()) {
    auto opened = MappedSegment::open(where, what);
    if (!opened.ok()) {
      segment_failures_.push_back(opened.status().message());
      while (segment_failures_.size() > kMaxMappedSegments) segment_failures_.pop_front();
      if (opened.status().code() != StatusCode::kFailedPrecondition) return opened.status();
    }
    it = segments_.emplace(blob.version, Mapped{where, opened.ok() ? std::move(*opened) : nullptr})
             .first;
    while (segments_.size() > kMaxMappedSegments) segments_.erase(segments_.begin());
  }
  return it->second.mapping ? it->second.mapping->data().data() : nullptr;
}

void UcxSubscriberTransport::on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<Connection*>(arg)->failure = status;
}

Status UcxSubscriberTransport::connect(const std::vector<uint8_t>& worker_address) {
  if (conn_ && conn_->worker_address == worker_address && conn_->failure == UCS_OK) {
    return ok_status();
  }
  disconnect();
  auto conn = std::make_unique<Connection>();
  conn->worker_address = worker_address;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(conn->worker_address.data());
  // Peer mode: a dead or vanished publisher fails the endpoint (and its gets) instead of
  // leaving them pending forever; it also allows the forced close disconnect() relies on.
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxSubscriberTransport::on_ep_error;
  params.err_handler.arg = conn.get();
  const ucs_status_t s = ucp_ep_create(worker_->get(), &params, &conn->ep);
  if (s != UCS_OK) return ucx_status(s, "ucx: ucp_ep_create to the publisher's worker");
  conn_ = std::move(conn);
  return ok_status();
}

void UcxSubscriberTransport::disconnect() {
  if (!conn_) return;
  if (conn_->ep != nullptr) {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_EP_CLOSE_FLAG_FORCE;
    const auto deadline = std::chrono::steady_clock::now() + kUcxReleaseGrace;
    (void)ucx_wait(worker_->get(), ucp_ep_close_nbx(conn_->ep, &params), deadline, "ucx: close");
  }
  // After the forced close every get has completed, so no operation uses these rkeys any more
  // (UCX asks for destruction before the endpoint's, which a forced close cannot offer).
  for (auto& [key, rkey] : conn_->rkeys) ucp_rkey_destroy(rkey);
  conn_.reset();
}

Result<ucp_rkey_h> UcxSubscriberTransport::rkey(uint64_t version, const UcxPartBlob& part) {
  const auto key = std::make_pair(version, part.name);
  auto it = conn_->rkeys.find(key);
  if (it != conn_->rkeys.end()) return it->second;
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t s = ucp_ep_rkey_unpack(conn_->ep, part.rkey.data(), &rkey);
  if (s != UCS_OK) {
    return ucx_status(s, "ucx: rkey of part '" + part.name + "' of version " +
                             std::to_string(version) + " does not unpack");
  }
  while (conn_->rkeys.size() >= kMaxCachedRkeys) {
    ucp_rkey_destroy(conn_->rkeys.begin()->second);
    conn_->rkeys.erase(conn_->rkeys.begin());
  }
  conn_->rkeys.emplace(key, rkey);
  return rkey;
}

// The publisher's memory is mapped here: copied a chunk at a time by this thread, each chunk
// hashed from the registers it is copied through. Nothing to progress and no connection
// involved: the mapping (a shared segment in segments_, or UCX's, held by the rkey) stays
// valid even if the publisher exits or retires the version meanwhile.
}  // namespace weightcast
