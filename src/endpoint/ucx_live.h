// The live UCX path of a rank group (DESIGN §5): besides writing each version to the journal,
// the publisher serves the version's delta from its own memory over UCX, and a live
// subscriber reads it with one-sided gets instead of reading the journal's files.
//
// What is served: a version's delta (for an anchor, the delta it carries), as parts of the
// UCX transport (transport/ucx/ucx_transport.h) named "MANIFEST" (the framed delta manifest
// of transport/fs/journal_files.h) and the manifest's part file names. The version blob that
// says where they are travels in the coordinator's Offer (control.proto Offer.ucx_blob), so
// no store is shared between hosts. A version without a delta (the first, a changed tensor
// set) is not served; subscribers read it from the journal.
//
// Every failure (publisher gone, version retired, corrupt part, deadline) is an error the
// subscriber nacks; the group's recovery then goes through the journal.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "codec/status.h"
#include "transport/fs/journal_writer.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

class InMemoryStore;
class UcxPublisherTransport;
class UcxSubscriberTransport;

// The name of the served manifest part.
inline constexpr const char* kUcxManifestPart = "MANIFEST";

// True when this build has the UCX backend.
bool ucx_built();

// Publisher side. Serving in place, keeps the last `keep_versions` served deltas' bytes alive
// (they are registered where they are); serving copies, the transport owns them. Serving one
// more retires the oldest.
class UcxLiveServer {
 public:
  // `tls`: the group's ucx.tls (empty: UCX chooses); `publisher_memory`: its
  // ucx.publisher_memory. kUnimplemented without UCX.
  static Result<std::unique_ptr<UcxLiveServer>> create(const std::string& tls,
                                                       const std::string& publisher_memory,
                                                       size_t keep_versions);
  ~UcxLiveServer();

  // "ucx (memory kinds: host, cuda)": what the UCX context detected, for the rank's log.
  std::string describe() const;

  // Serves `delta` as version `version` and returns its version blob for the Offer.
  Result<std::string> serve(uint64_t version, DeltaInMemory delta);

  // Stops serving every version, as a publisher whose worker died would (tests).
  void close_for_test();

 private:
  UcxLiveServer() = default;
  struct Served {
    uint64_t version = 0;
    std::vector<uint8_t> manifest;
    std::vector<std::vector<uint8_t>> parts;
  };
  std::shared_ptr<InMemoryStore> store_;
  std::unique_ptr<UcxPublisherTransport> transport_;
  std::deque<Served> served_;
  size_t keep_versions_ = 2;
  std::string tls_;
  bool copies_ = false;
};

// A version's delta as it arrived over UCX: the manifest and the parts' stored bytes, for
// CatchUpReader::apply_delta_from.
struct FetchedDelta {
  proto::StepManifest manifest;
  std::vector<std::vector<uint8_t>> parts;
  uint64_t bytes_read = 0;
};

// Checks a live delta's served parts against its manifest (version `version`): `served` names
// the parts in the order served, the manifest part first, then exactly the manifest's part
// files in its order. kDataLoss naming `what` otherwise. Shared by the UCX and NCCL paths.
Status check_live_delta_parts(const std::string& what, uint64_t version,
                              const proto::StepManifest& manifest,
                              const std::vector<std::string>& served);

// Subscriber side. After a connection error the UCX objects are rebuilt on the next fetch (a
// restarted publisher has a new worker address).
class UcxLiveFetcher {
 public:
  static Result<std::unique_ptr<UcxLiveFetcher>> create(const std::string& tls);
  ~UcxLiveFetcher();

  // Reads version `version` described by `blob` (an Offer's ucx_blob): the manifest first
  // (checked as a journal manifest is), then every part it lists (size and XXH3 verified).
  Result<FetchedDelta> fetch(uint64_t version, const std::string& blob,
                             std::chrono::steady_clock::time_point deadline);
  std::string describe() const;

 private:
  UcxLiveFetcher() = default;
  Status ensure_transport();
  std::string tls_;
  std::shared_ptr<InMemoryStore> store_;
  std::unique_ptr<UcxSubscriberTransport> transport_;
};

}  // namespace weightcast
