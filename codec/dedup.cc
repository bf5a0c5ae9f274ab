#include "codec/dedup.h"

#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <unordered_map>

#include "codec/base/thread_pool.h"

namespace weightcast {
namespace {

struct Fingerprint {
  XXH128_hash_t hash;
  DType dtype;
  const std::vector<int64_t>* shape;

  bool operator==(const Fingerprint& o) const {
    return hash.low64 == o.hash.low64 && hash.high64 == o.hash.high64 && dtype == o.dtype &&
           *shape == *o.shape;
  }
};

struct FingerprintHash {
  size_t operator()(const Fingerprint& f) const { return static_cast<size_t>(f.hash.low64); }
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool same_bytes(const TensorBytesView& a, const TensorBytesView& b) {
  return a.bytes.size() == b.bytes.size() &&
         (a.bytes.empty() || std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0);
}

}  // namespace

Result<DedupResult> deduplicate(std::span<const TensorBytesView> tensors, ThreadPool* pool,
                                DedupTimings* timings) {
  if (tensors.size() >= UINT32_MAX) {
    return out_of_range("deduplicate: " + std::to_string(tensors.size()) +
                        " tensors exceed 2^32 - 1");
  }
  const double t0 = now_s();
  std::vector<XXH128_hash_t> hashes(tensors.size());
  auto hash_one = [&](size_t i) {
    hashes[i] = XXH3_128bits(tensors[i].bytes.data(), tensors[i].bytes.size());
  };
  if (pool != nullptr) {
    pool->parallel_for(tensors.size(), hash_one);
  } else {
    for (size_t i = 0; i < tensors.size(); ++i) hash_one(i);
  }
  const double t1 = now_s();

  DedupResult out;
  out.storage_of.resize(tensors.size());
  // Each fingerprint maps to the storages seen with it; more than one only on a collision.
  std::unordered_map<Fingerprint, std::vector<uint32_t>, FingerprintHash> seen;
  seen.reserve(tensors.size());
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    const TensorBytesView& t = tensors[i];
    out.stats.keys += 1;
    out.stats.logical_bytes += t.bytes.size();
    auto& candidates = seen[Fingerprint{hashes[i], t.dtype, &t.shape}];
    uint32_t storage = UINT32_MAX;
    for (uint32_t s : candidates) {
      if (same_bytes(tensors[out.representative[s]], t)) {
        storage = s;
        break;
      }
    }
    if (storage == UINT32_MAX) {
      storage = static_cast<uint32_t>(out.representative.size());
      out.representative.push_back(i);
      candidates.push_back(storage);
      out.stats.unique_storages += 1;
      out.stats.unique_bytes += t.bytes.size();
    }
    out.storage_of[i] = storage;
  }
  if (timings != nullptr) {
    timings->fingerprint_s = t1 - t0;
    timings->confirm_s = now_s() - t1;
  }
  return out;
}

}  // namespace weightcast
