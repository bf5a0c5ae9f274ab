// The reads of UcxSubscriberTransport (ucx_transport.h): by loads from memory mapped here, and
// by chunked one-sided gets, each verifying the bytes' XXH3 when the caller gives one.
#include <xxhash.h>
// The runtime-dispatched XXH3, as in ucx_subscriber.cc.
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstdio>
#include <list>
#include <memory>
#include <thread>

#include "transport/ucx/copying_hasher.h"
#include "transport/ucx/ucx_transport.h"

namespace weightcast {
namespace {

// Bytes hashed between two progress calls while gets are in flight: small enough that the
// gets (which, emulated over tcp or shm, need this worker's progress) keep streaming.
constexpr size_t kHashSlice = 256 << 10;

Status check_hash(uint64_t got, uint64_t expected) {
  if (got == expected) return ok_status();
  char hex[64];
  std::snprintf(hex, sizeof hex, "%016llx, expected %016llx", static_cast<unsigned long long>(got),
                static_cast<unsigned long long>(expected));
  return data_loss(std::string("the bytes read do not match their XXH3 (") + hex + ")");
}

}  // namespace

Status UcxSubscriberTransport::read_mapped(const uint8_t* mapped, std::span<uint8_t> dest,
                                           std::optional<uint64_t> xxh3, Deadline deadline) {
  CopyingHasher copier(dest);
  constexpr size_t kBlock = CopyingHasher::kBlockBytes;
  const size_t chunk = std::max<size_t>(options_.mapped_chunk_bytes / kBlock * kBlock, 4096);
  while (copier.copied() < dest.size()) {
    const size_t done = copier.copied();
    const size_t n = std::min(chunk, dest.size() - done);
    copier.copy({mapped + done, n});
    if (options_.after_chunk) options_.after_chunk(done + n);
    if (done + n < dest.size() && std::chrono::steady_clock::now() > deadline) {
      return deadline_exceeded("deadline passed after " + std::to_string(done + n) + " of " +
                               std::to_string(dest.size()) + " bytes");
    }
  }
  return xxh3 ? check_hash(copier.digest(), *xxh3) : ok_status();
}

// Chunked gets with at most max_in_flight outstanding; on any failure or the deadline the
// remaining gets are abandoned by force-closing the endpoint, and this returns only once UCX
// has let go of every one of them (so nothing writes into `dest` afterwards).
//
// Verification overlaps the transfer: the prefix of `dest` whose gets have all completed is
// hashed (XXH3, streaming) a slice at a time between progress calls, while later gets are in
// flight, and the complete part is compared with part.xxh3: kDataLoss, naming both hashes,
// when they differ. Hashing a chunk just after it lands also reads it from cache, not DRAM.
Status UcxSubscriberTransport::get_chunks(uint64_t remote_address, ucp_rkey_h rkey,
                                          std::span<uint8_t> dest, std::optional<uint64_t> xxh3,
                                          Deadline deadline) {
  struct InFlight {
    void* request;
    size_t offset;
    size_t bytes;
  };
  const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash(XXH3_createState(),
                                                                             &XXH3_freeState);
  if (!hash || XXH3_64bits_reset(hash.get()) != XXH_OK) return internal_error("XXH3 state");
  size_t hashed = 0;
  std::list<InFlight> in_flight;
  ucp_request_param_t params{};  // no callback: requests are polled
  size_t next = 0;
  uint64_t done = 0;
  Status error = ok_status();
  ucp_worker_h worker = worker_->get();
  auto completed = [&](size_t bytes) {
    done += bytes;
    if (options_.after_chunk) options_.after_chunk(done);
  };
  while (error.ok() && (next < dest.size() || !in_flight.empty())) {
    while (next < dest.size() && in_flight.size() < options_.max_in_flight) {
      const size_t n = std::min(options_.chunk_bytes, dest.size() - next);
      ucs_status_ptr_t r =
          ucp_get_nbx(conn_->ep, dest.data() + next, n, remote_address + next, rkey, &params);
      if (UCS_PTR_IS_ERR(r)) {
        error = ucx_status(UCS_PTR_STATUS(r), "get at offset " + std::to_string(next));
        break;
      }
      next += n;
      if (r == nullptr) {
        completed(n);
      } else {
        in_flight.push_back({r, next - n, n});
      }
    }
    if (!error.ok()) break;
    const unsigned events = ucp_worker_progress(worker);
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      const ucs_status_t s = ucp_request_check_status(it->request);
      if (s == UCS_INPROGRESS) {
        ++it;
        continue;
      }
      ucp_request_free(it->request);
      if (s != UCS_OK && error.ok()) error = ucx_status(s, "get");
      if (s == UCS_OK) completed(it->bytes);
      it = in_flight.erase(it);
    }
    // Everything below the oldest get still in flight has landed, whatever order they finish in.
    const size_t landed = in_flight.empty() ? next : in_flight.front().offset;
    if (error.ok() && hashed < landed) {
      const size_t n = in_flight.empty() ? landed - hashed : std::min(landed - hashed, kHashSlice);
      (void)XXH3_64bits_update(hash.get(), dest.data() + hashed, n);
      hashed += n;
    } else if (events == 0) {
      // Nothing arrived and nothing to hash: over tcp and shm the publisher's progress thread
      // serves these gets, and it may be waiting for this core.
      std::this_thread::yield();
    }
    if (error.ok() && conn_->failure != UCS_OK) {
      error = ucx_status(conn_->failure, "connection to the publisher");
    }
    if (error.ok() && std::chrono::steady_clock::now() > deadline) {
      error = deadline_exceeded("deadline passed after " + std::to_string(done) + " of " +
                                std::to_string(dest.size()) + " bytes");
    }
  }
  if (error.ok() && conn_->failure != UCS_OK) {
    error = ucx_status(conn_->failure, "connection to the publisher");
  }
  if (in_flight.empty() && error.ok()) {
    (void)XXH3_64bits_update(hash.get(), dest.data() + hashed, dest.size() - hashed);
    return xxh3 ? check_hash(XXH3_64bits_digest(hash.get()), *xxh3) : ok_status();
  }
  if (in_flight.empty() && conn_->failure == UCS_OK) return error;
  for (const auto& f : in_flight) ucp_request_cancel(worker, f.request);
  std::vector<void*> requests;
  for (const auto& f : in_flight) requests.push_back(f.request);
  disconnect();  // a failed or abandoned endpoint is of no further use
  const auto give_up = std::chrono::steady_clock::now() + kUcxReleaseGrace;
  for (void* r : requests) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS) {
      if (std::chrono::steady_clock::now() > give_up) {
        return internal_error(error.message() + "; UCX did not release a cancelled get (leaked)");
      }
      ucp_worker_progress(worker);
    }
    ucp_request_free(r);
  }
  return error;
}

}  // namespace weightcast
