#include "transport/copy_executor.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "codec/base/thread_pool.h"

namespace weightcast {
namespace {

// Transfers are copied in pieces of this size so that one large transfer uses the whole pool
// and cancellation is noticed within a piece.
constexpr uint64_t kPieceBytes = uint64_t{4} << 20;

struct Piece {
  uint32_t transfer;
  uint64_t offset, bytes;
};

}  // namespace

std::span<const uint8_t> StagedCopies::slice(size_t request) const {
  return slices_.at(request);
}

size_t StagedCopies::reused_transfers() const {
  return static_cast<size_t>(std::count_if(staging_.begin(), staging_.end(),
                                           [](const StagingBuffer& b) { return b.warm(); }));
}

uint64_t StagedCopies::staged_bytes() const {
  uint64_t total = 0;
  for (uint64_t b : staging_bytes_) total += b;
  return total;
}

Result<StagedCopies> execute_copy_plan(const CopyPlan& plan, std::span<const CopyRequest> requests,
                                       std::span<const uint8_t* const> sources, ThreadPool* pool,
                                       const CancelToken* cancel, StagingPool* staging) {
  if (plan.slices.size() != requests.size()) {
    return invalid_argument("copy plan has " + std::to_string(plan.slices.size()) + " slices for " +
                            std::to_string(requests.size()) + " requests");
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const CopyRequest& r = requests[i];
    if (r.source >= sources.size() || sources[r.source] == nullptr) {
      return invalid_argument("copy request '" + r.name + "': source " + std::to_string(r.source) +
                              " was not given");
    }
    if (r.offset > r.source_bytes || r.bytes > r.source_bytes - r.offset) {
      return invalid_argument("copy request '" + r.name + "': bytes [" + std::to_string(r.offset) +
                              ", +" + std::to_string(r.bytes) + ") lie outside its source of " +
                              std::to_string(r.source_bytes) + " bytes");
    }
  }
  StagedCopies out;
  std::vector<Piece> pieces;
  for (uint32_t t = 0; t < plan.transfers.size(); ++t) {
    const uint64_t n = plan.transfers[t].bytes;
    Result<StagingBuffer> buffer = staging != nullptr ? staging->acquire(n) : allocate_staging(n);
    if (!buffer.ok()) {
      return buffer.status().with_context("staging copy plan transfer " + std::to_string(t) +
                                          " (source " + std::to_string(plan.transfers[t].source) +
                                          ")");
    }
    out.staging_.push_back(std::move(*buffer));
    out.staging_bytes_.push_back(n);
    for (uint64_t at = 0; at < n; at += kPieceBytes)
      pieces.push_back({t, at, std::min(kPieceBytes, n - at)});
  }
  auto copy_piece = [&](size_t k) {
    if (cancel != nullptr && cancel->cancelled.load(std::memory_order_relaxed)) return;
    const Piece& p = pieces[k];
    const PlannedTransfer& t = plan.transfers[p.transfer];
    const StagingBuffer& dst = out.staging_[p.transfer];
    dst.prefault(p.offset, p.bytes);  // one system call instead of a fault per page
    std::memcpy(dst.data() + p.offset, sources[t.source] + t.offset + p.offset, p.bytes);
  };
  if (pool != nullptr) {
    pool->parallel_for(pieces.size(), copy_piece);
  } else {
    for (size_t k = 0; k < pieces.size(); ++k) copy_piece(k);
  }
  if (cancel != nullptr && cancel->cancelled.load()) {
    return failed_precondition("copy plan of " + std::to_string(plan.transfers.size()) +
                               " transfers cancelled; staging released");
  }
  out.slices_.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestSlice& s = plan.slices[i];
    out.slices_[i] = {out.staging_[s.transfer].data() + s.offset, requests[i].bytes};
  }
  return out;
}

}  // namespace weightcast
