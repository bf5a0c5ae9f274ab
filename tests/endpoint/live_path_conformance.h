// The contract of src/endpoint/live_path.h, written once (live_path_conformance_test.cc) and
// instantiated for every live path (ucx_live_path_test.cc, nccl_live_path_test.cc): a
// server (rank 1) and a fetcher (rank 2) of one path in one process, real deltas from a
// scratch journal served and fetched through the descriptors the server returns, as the
// coordinator would carry them. A path this host cannot run (LivePath::viable) skips every
// case with the reason; so does one whose pair cannot form here when the backend says the
// host may lack it (two NCCL ranks on one GPU).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "src/endpoint/live_path.h"

namespace weightcast::testing {

// What the sides of a path send to the coordinator (LivePathRank::send), kept by rank.
class ControlInbox {
 public:
  std::function<void(proto::Envelope)> sender(uint32_t rank);
  // Takes the first message from `rank` that `match` accepts, waiting up to `timeout`.
  std::optional<proto::Envelope> take(uint32_t rank,
                                      const std::function<bool(const proto::Envelope&)>& match,
                                      std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint32_t, proto::Envelope>> messages_;
};

// One server and one fetcher of the path under test.
struct LivePathPair {
  static constexpr uint32_t kServerRank = 1;
  static constexpr uint32_t kFetcherRank = 2;
  std::unique_ptr<LivePathServer> server;
  std::unique_ptr<LivePathFetcher> fetcher;
  std::shared_ptr<ControlInbox> inbox;
};

struct LivePathBackend {
  std::string name;  // of the instantiation: "ucx_shm_in_place", "nccl_loopback"
  std::shared_ptr<const LivePath> path;
  proto::GroupConfig config;  // its transports list the path
  // Brings the pair to where serve() returns descriptors (NCCL: forms an epoch, playing the
  // coordinator); unset: nothing to do.
  std::function<Status(LivePathPair&)> connect;
  // A failed connect skips (with its message) instead of failing: the host may lack it.
  bool connect_may_fail_here = false;
};

// What gtest prints for a parameter.
inline void PrintTo(const LivePathBackend& backend, std::ostream* os) {
  *os << backend.name;
}

// A group config listing `path` (and fs) with short deadlines, for the backends.
proto::GroupConfig live_path_test_config(const std::string& path);

class LivePathConformance : public ::testing::TestWithParam<LivePathBackend> {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Serves version `version` of the scratch model's journal (1..kVersions) and carries the
  // descriptor to the fetcher as an Offer would. The descriptor is returned (empty: not
  // served).
  std::string serve_and_offer(uint64_t version);
  // The delta of `version` (1..kVersions), as its publisher holds it.
  std::shared_ptr<const DeltaInMemory> shared_delta(uint64_t version) const {
    return deltas_.at(version - 1);
  }
  const DeltaInMemory& delta(uint64_t version) const { return *shared_delta(version); }
  static constexpr uint64_t kVersions = 3;

  LivePathPair pair_;

 private:
  std::string scratch_;
  std::vector<std::shared_ptr<const DeltaInMemory>> deltas_;
};

}  // namespace weightcast::testing
