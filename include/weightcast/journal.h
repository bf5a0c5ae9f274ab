// Reading a group's filesystem journal without joining the group: which versions it holds,
// what tensors a version has, and bringing caller-owned tensors to a version in place with
// every check a subscriber makes (part XXH3s, record headers, tensor checksums; an older
// anchor when a newer one is damaged). The journal's layout: docs/FORMATS.md.
//
//   auto journal = weightcast::api::Journal::open("/shared/run7/journal");
//   auto tensors = (*journal)->tensors();          // names, dtypes, shapes at HEAD
//   ... allocate a destination for each, in that order ...
//   auto done = (*journal)->catch_up(destinations); // now they hold HEAD, verified
//
// A Journal only reads; it takes a lease for the steps it replays (so the writer's retention
// keeps them) and releases it when the catch-up ends. It may be used while a publisher writes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightcast/status.h"
#include "weightcast/tensor.h"

namespace weightcast::api {

struct JournalVersion {
  uint64_t version = 0;
  bool anchor = false;           // a full snapshot (else a delta against version - 1)
  uint64_t anchor_version = 0;   // the anchor its chain replays from (itself for an anchor)
  uint64_t stored_bytes = 0;     // bytes of its files
  uint64_t changed_tensors = 0;  // a delta's tensors with a record (an anchor's: all)
};

struct JournalTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t checksum = 0;  // weightcast's checksum of the tensor at that version (FORMATS.md)
};

struct CatchUpResult {
  uint64_t version = 0;  // the version the destinations hold now
  uint64_t anchors_loaded = 0;
  uint64_t deltas_applied = 0;
  uint64_t bytes_written = 0;          // into the destinations
  std::vector<std::string> fallbacks;  // why a plan was abandoned (a damaged anchor...)
  double seconds = 0;
};

class Journal {
 public:
  // kNotFound (naming the root) when `root` has no journal HEAD.
  static Result<std::unique_ptr<Journal>> open(const std::string& root);
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();

  const std::string& root() const;
  // HEAD's version, re-read on every call (nullopt while nothing is committed).
  Result<std::optional<uint64_t>> head() const;
  // The committed versions whose step is on disk (retention removes old ones), ascending.
  Result<std::vector<JournalVersion>> versions() const;
  // The tensors of `version` (default HEAD), in the journal's order.
  Result<std::vector<JournalTensor>> tensors(std::optional<uint64_t> version = {}) const;

  // Writes `version` (default HEAD) into `destinations` in place: one per tensor of that
  // version, in tensors()'s order with its name, dtype and shape; host memory, any strides.
  // `held`: the version the destinations already hold, trusted only once every checksum
  // matches (then only the deltas since are applied), else an anchor is loaded. On failure
  // the destinations' contents are undefined and the error names the version and tensor.
  Result<CatchUpResult> catch_up(const std::vector<TensorRef>& destinations,
                                 std::optional<uint64_t> version = {},
                                 std::optional<uint64_t> held = {}, size_t threads = 0) const;

 private:
  struct Impl;
  explicit Journal(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast::api
