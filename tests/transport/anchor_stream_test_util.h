// Helpers of the streamed-anchor suites (anchor_stream_test.cc, anchor_stream_journal_test.cc):
// a model cut into runs of elements in random order, as the hooks of an optimizer step hand
// them over, written from several threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "codec/base/status.h"
#include "codec/formats/safetensors_format.h"
#include "transport/fs/anchor_stream.h"

namespace weightcast::anchor_testing {

inline std::vector<SafetensorsTensorSpec> specs_of(const std::vector<AnchorTensor>& tensors) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  return specs;
}

// A run of elements of one tensor, as one hook call of the optimizer step would hand over.
struct Piece {
  size_t tensor = 0;
  uint64_t first = 0;
  uint64_t count = 0;
};

// Every tensor cut into runs of 1..max_elements elements, all shuffled together.
inline std::vector<Piece> random_pieces(const std::vector<AnchorTensor>& tensors,
                                        std::mt19937_64& rng, uint64_t max_elements) {
  std::vector<Piece> pieces;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t numel = tensors[i].bytes.size() / dtype_size(tensors[i].dtype);
    for (uint64_t at = 0; at < numel;) {
      const uint64_t n = std::min<uint64_t>(numel - at, 1 + rng() % max_elements);
      pieces.push_back({i, at, n});
      at += n;
    }
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  return pieces;
}

inline std::span<const uint8_t> piece_bytes(const AnchorTensor& t, const Piece& p) {
  const size_t elem = dtype_size(t.dtype);
  return t.bytes.subspan(p.first * elem, p.count * elem);
}

// Writes the pieces from `threads` threads taking them in turn; the first error.
inline Status write_concurrently(StreamingAnchorWriter& w, const std::vector<AnchorTensor>& tensors,
                                 const std::vector<Piece>& pieces, size_t threads) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status first = ok_status();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (true) {
        const size_t k = next.fetch_add(1);
        if (k >= pieces.size()) return;
        const Piece& p = pieces[k];
        Status s = w.write(p.tensor, p.first, piece_bytes(tensors[p.tensor], p));
        std::lock_guard<std::mutex> lock(mutex);
        if (!s.ok() && first.ok()) first = std::move(s);
      }
    });
  }
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace weightcast::anchor_testing
