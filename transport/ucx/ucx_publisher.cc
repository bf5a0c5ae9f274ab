// UcxPublisherTransport (ucx_transport.h): parts mapped in place or copied into a shared
// segment, blobs in the store.
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <set>

#include "transport/ucx/ucx_transport.h"

namespace weightcast {
namespace {

Status check_deadline(Deadline deadline, const std::string& what) {
  if (std::chrono::steady_clock::now() > deadline)
    return deadline_exceeded(what + ": deadline passed");
  return ok_status();
}

}  // namespace

std::string ucx_version_key(uint64_t version) {
  char key[32];
  std::snprintf(key, sizeof key, "v/%020llu", static_cast<unsigned long long>(version));
  return key;
}

VersionDescriptor ucx_descriptor(const UcxVersionBlob& blob) {
  VersionDescriptor d;
  d.version = blob.version;
  for (const auto& p : blob.parts) d.parts.push_back({p.name, p.bytes, p.xxh3});
  return d;
}

Result<std::unique_ptr<UcxPublisherTransport>> UcxPublisherTransport::create(
    UcxPublisherOptions options) {
  if (!options.store) return invalid_argument("ucx publisher: no rendezvous store given");
  if (options.keep_versions == 0) options.keep_versions = 1;
  ASSIGN_OR_RETURN(UcxContextAndWorker created, create_ucx_context_and_worker(options.tls));
  ASSIGN_OR_RETURN(std::vector<uint8_t> address, created.worker->address());
  return std::unique_ptr<UcxPublisherTransport>(
      new UcxPublisherTransport(std::move(options), std::move(created), std::move(address)));
}

UcxPublisherTransport::UcxPublisherTransport(UcxPublisherOptions options,
                                             UcxContextAndWorker created,
                                             std::vector<uint8_t> worker_address)
    : options_(std::move(options)),
      context_(std::move(created.context)),
      worker_(std::move(created.worker)),
      worker_address_(std::move(worker_address)) {
  progress_ = std::thread([this] { progress_loop(); });
}

UcxPublisherTransport::~UcxPublisherTransport() {
  close_worker();
}

TransportInfo UcxPublisherTransport::info() const {
  return ucx_transport_info(*context_);
}

// Gets over tcp and shared memory are answered by this worker, so it must be progressed even
// when no publish() is running. Spins briefly after activity (a transfer in progress), then
// sleeps between polls so that an idle publisher costs little CPU. (Blocking in
// ucp_worker_wait would need UCP_FEATURE_WAKEUP, which some transports lack, and would hold
// the worker while publish() needs it.)
void UcxPublisherTransport::progress_loop() {
  int idle = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    unsigned events = 0;
    {
      std::lock_guard lock(mu_);
      if (!worker_) return;
      for (int i = 0; i < 64; ++i) {
        const unsigned n = ucp_worker_progress(worker_->get());
        if (n == 0) break;
        events += n;
      }
    }
    if (events > 0) {
      idle = 0;
    } else if (++idle < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

Status UcxPublisherTransport::publish(uint64_t version, std::span<const PartPayload> parts,
                                      Deadline deadline) {
  const std::string what = "ucx publish of version " + std::to_string(version);
  RETURN_IF_ERROR(check_deadline(deadline, what));
  std::set<std::string> names;
  for (const auto& p : parts) {
    if (p.name.empty() || p.name.size() > kUcxBlobMaxNameBytes || !names.insert(p.name).second) {
      return invalid_argument(what + ": part name '" + p.name.substr(0, 64) +
                              "' is empty, too long or repeated");
    }
  }
  if (options_.memory == UcxPublisherOptions::Memory::kCopyToSharedMemory) {
    return publish_copies(version, parts, deadline, what);
  }
  std::unique_lock lock(mu_, std::defer_lock);
  // Hashing is the slow part and needs no worker: done before taking the lock.
  std::vector<uint64_t> hashes;
  for (const auto& p : parts) hashes.push_back(XXH3_64bits(p.bytes.data(), p.bytes.size()));
  RETURN_IF_ERROR(lock_for(lock, deadline, what));
  return sticky_.record(publish_locked(version, parts, hashes, nullptr, deadline));
}

Status UcxPublisherTransport::lock_for(std::unique_lock<std::timed_mutex>& lock, Deadline deadline,
                                       const std::string& what) {
  if (!lock.try_lock_until(deadline)) return deadline_exceeded(what + ": publisher busy");
  RETURN_IF_ERROR(sticky_.check());
  if (!worker_) return sticky_.record(io_error(what + ": the publisher's worker is closed"));
  return ok_status();
}

// Copied and hashed (from the copy, so that the hash describes what is served) without the
// lock, so that gets of older versions keep being served meanwhile. One segment per version,
// each part at a 64-byte boundary in it.
Status UcxPublisherTransport::publish_copies(uint64_t version, std::span<const PartPayload> parts,
                                             Deadline deadline, const std::string& what) {
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const auto& p : parts) {
    total = (total + 63) / 64 * 64;
    offsets.push_back(total);
    total += p.bytes.size();
  }
  ASSIGN_OR_RETURN(std::shared_ptr<SharedSegment> segment,
                   SharedSegment::create(total, what + ": shared segment for its copies"));
  std::vector<uint64_t> hashes;
  std::vector<PartPayload> copies;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::span<uint8_t> to = segment->data().subspan(offsets[i], parts[i].bytes.size());
    if (!to.empty()) std::memcpy(to.data(), parts[i].bytes.data(), to.size());
    hashes.push_back(XXH3_64bits(to.data(), to.size()));
    copies.push_back({parts[i].name, to});
  }
  std::unique_lock lock(mu_, std::defer_lock);
  RETURN_IF_ERROR(lock_for(lock, deadline, what));
  return sticky_.record(publish_locked(version, copies, hashes, std::move(segment), deadline));
}

void UcxPublisherTransport::unmap_all(const std::vector<ucp_mem_h>& memhs) {
  for (ucp_mem_h memh : memhs) {
    if (memh != nullptr) (void)ucp_mem_unmap(context_->get(), memh);
  }
}

Status UcxPublisherTransport::publish_locked(uint64_t version, std::span<const PartPayload> parts,
                                             const std::vector<uint64_t>& hashes,
                                             std::shared_ptr<SharedSegment> segment,
                                             Deadline deadline) {
  const std::string what = "ucx publish of version " + std::to_string(version);
  Published pub{version, {}, segment};
  auto fail = [&](Status s) {
    unmap_all(pub.memhs);
    return s;
  };
  if (has_latest_ && version <= latest_) {
    return fail(
        failed_precondition(what + " is not newer than the latest " + std::to_string(latest_)));
  }
  // Another publisher may have used the store before this one (a restart): stay above it.
  auto stored = options_.store->get(kUcxLatestKey);
  if (!stored.ok()) return fail(stored.status());
  if (*stored) {
    auto blob = decode_ucx_version_blob(**stored);
    if (blob.ok() && version <= blob->version) {
      return fail(failed_precondition(what + " is not newer than the store's latest " +
                                      std::to_string(blob->version)));
    }
  }
  UcxVersionBlob blob{version, worker_address_, {}, segment != nullptr, {}};
  if (segment) blob.segment = segment->locator();
  for (size_t i = 0; i < parts.size(); ++i) {
    const PartPayload& p = parts[i];
    const std::string part_what = what + " part '" + p.name + "'";
    if (Status s = check_deadline(deadline, what); !s.ok()) return fail(s);
    UcxPartBlob b{
        p.name, p.bytes.size(), hashes[i], reinterpret_cast<uintptr_t>(p.bytes.data()), {}};
    if (segment) b.segment_offset = static_cast<uint64_t>(p.bytes.data() - segment->data().data());
    ucp_mem_h memh = nullptr;
    if (!p.bytes.empty()) {
      ucp_mem_map_params_t params{};
      params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                          UCP_MEM_MAP_PARAM_FIELD_PROT;
      // In place (the caller's buffer or its copy), read-only for everyone: subscribers only
      // ever get from it.
      params.address = const_cast<uint8_t*>(p.bytes.data());
      params.length = p.bytes.size();
      params.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_REMOTE_READ;
      ucs_status_t s = ucp_mem_map(context_->get(), &params, &memh);
      if (s != UCS_OK) return fail(ucx_status(s, part_what + ": ucp_mem_map"));
    }
    pub.memhs.push_back(memh);
    if (memh != nullptr) {
      void* rkey = nullptr;
      size_t rkey_bytes = 0;
      const ucs_status_t s = ucp_rkey_pack(context_->get(), memh, &rkey, &rkey_bytes);
      if (s != UCS_OK) return fail(ucx_status(s, part_what + ": ucp_rkey_pack"));
      const auto* rb = static_cast<const uint8_t*>(rkey);
      b.rkey.assign(rb, rb + rkey_bytes);
      ucp_rkey_buffer_release(rkey);
    }
    blob.parts.push_back(std::move(b));
  }
  auto encoded = encode_ucx_version_blob(blob);
  if (!encoded.ok()) return fail(encoded.status());
  // The version's key first, then "latest": a reader that finds "latest" finds its version.
  if (Status s = options_.store->put(ucx_version_key(version), *encoded); !s.ok()) return fail(s);
  if (Status s = options_.store->put(kUcxLatestKey, std::move(*encoded)); !s.ok()) {
    (void)options_.store->erase(ucx_version_key(version));
    return fail(s);
  }
  published_.push_back(std::move(pub));
  latest_ = version;
  has_latest_ = true;
  while (published_.size() > options_.keep_versions) {
    retire(published_.front());
    published_.pop_front();
  }
  while (lingering_.size() > options_.keep_versions) {
    Published& gone = lingering_.front();
    unmap_all(gone.memhs);
    if (gone.segment != nullptr && gone.segment->release_memory_keep_addresses()) {
      placeholders_.push_back(std::move(gone.segment));
    }
    lingering_.pop_front();
  }
  while (placeholders_.size() > kPlaceholderVersions) placeholders_.pop_front();
  return ok_status();
}

void UcxPublisherTransport::retire(const Published& p) {
  // Erased before unmapping, so that no new fetch starts on memory about to be released.
  (void)options_.store->erase(ucx_version_key(p.version));
  if (has_latest_ && p.version == latest_) (void)options_.store->erase(kUcxLatestKey);
  if (options_.memory == UcxPublisherOptions::Memory::kCopyToSharedMemory && worker_) {
    lingering_.push_back(p);
  } else {
    unmap_all(p.memhs);
  }
}

void UcxPublisherTransport::close_worker() {
  stop_ = true;
  if (progress_.joinable()) progress_.join();
  std::lock_guard lock(mu_);
  // Before anything is unmapped: the flush still answers gets (ucx_context.h).
  if (worker_) worker_->flush(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  for (const auto& p : published_) retire(p);  // copies move to lingering_
  published_.clear();
  for (const auto& p : lingering_) unmap_all(p.memhs);
  lingering_.clear();
  worker_.reset();
  placeholders_.clear();  // no worker answers gets any more
}

}  // namespace weightcast
