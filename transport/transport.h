// The data-plane interface every backend implements (ARCHITECTURE.md §5): fs (the journal), ucx,
// nccl.
//
// A version's payload is a list of named parts (byte blobs). A publisher makes all parts of a
// version available at once; a subscriber learns which versions exist, describes one (its
// parts, sizes and XXH3-64s) and fetches parts into memory it owns, each verified against its
// XXH3 before the call returns. The control plane (ZeroMQ) decides who fetches what; this
// interface only moves bytes.
//
// Contracts shared by every backend (checked by tests/transport/transport_conformance.h):
//  * publish is all or nothing: describe/latest never show a version with missing parts;
//  * versions increase: publishing one not newer than the latest is kFailedPrecondition;
//  * fetch fills `dest` completely (its size must equal the part's) or fails with kDataLoss
//    naming the part when the bytes do not match their XXH3;
//  * every call takes a deadline and returns kDeadlineExceeded rather than wait past it;
//  * an I/O or connection error breaks the connection for good: every later call on the same
//    object returns kUnavailable naming the first error (StickyError below); data errors (a
//    corrupt part) do not.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_ref.h"  // MemoryKind

namespace weightcast {

using Deadline = std::chrono::steady_clock::time_point;

inline Deadline deadline_in(std::chrono::milliseconds ms) {
  return std::chrono::steady_clock::now() + ms;
}

struct TransportInfo {
  std::string name;                      // "fs", "ucx", "nccl"
  std::vector<MemoryKind> memory_kinds;  // what publish() and fetch() accept
  bool durable = false;                  // parts survive the publisher (fs)
  std::string notes;                     // backend details worth a log line (may be empty)
};

struct PartPayload {
  std::string name;
  std::span<const uint8_t> bytes;
};

struct PartDescriptor {
  std::string name;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

struct VersionDescriptor {
  uint64_t version = 0;
  std::vector<PartDescriptor> parts;
};

// The two halves of a backend, each made by the backend's factory (a static create returning
// Result<std::unique_ptr<...>>, which fails when the backend cannot run here) and used only
// through these interfaces by the endpoints and the conformance suite. A process that both
// publishes and reads holds one of each.
class PartPublisher {
 public:
  virtual ~PartPublisher() = default;

  virtual TransportInfo info() const = 0;

  // Makes `parts` (unique, safe names) of `version` available to readers, all at once.
  [[nodiscard]] virtual Status publish(uint64_t version, std::span<const PartPayload> parts,
                                       Deadline deadline) = 0;
};

class PartReader {
 public:
  virtual ~PartReader() = default;

  virtual TransportInfo info() const = 0;

  // The newest published version (kNotFound when there is none).
  [[nodiscard]] virtual Result<VersionDescriptor> latest(Deadline deadline) = 0;

  // The parts of `version` (kNotFound when it is not, or no longer, available).
  [[nodiscard]] virtual Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) = 0;

  // Copies one part of `version` into `dest` and verifies it.
  [[nodiscard]] virtual Status fetch(uint64_t version, const PartDescriptor& part,
                                     std::span<uint8_t> dest, Deadline deadline) = 0;
};

// A connection's state: whole until its first connection error (I/O or internal), broken for
// good after it. Every later call returns kUnavailable, whose message is the first error's,
// so that a caller sees a broken connection by its code and knows to make a new one.
class StickyError {
 public:
  // Returns `s`, breaking the connection when it is a connection error.
  Status record(Status s);
  // kUnavailable ("connection broken by an earlier error: <the first one>") once broken, or ok.
  Status check() const;

 private:
  Status first_ = ok_status();
};

}  // namespace weightcast
