// The broadcast transport (tests/support/broadcast_transport.h) over a one-rank NCCL group
// under the conformance suite every backend passes (tests/transport/transport_conformance.h):
// one GPU holds one rank, which publishes each version as a round broadcast to itself and
// serves it through its reader(). Without a usable GPU or a loadable NCCL every case skips
// and says why; the same transport runs the suite on the loopback group in transport_tests.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "tests/support/broadcast_transport.h"
#include "tests/transport/transport_conformance.h"
#include "tests/transport_nccl/nccl_test_skip.h"
#include "transport/nccl/nccl_broadcast_group.h"

namespace weightcast::testing {
namespace {

using namespace std::chrono_literals;

// No peers: the suite skips with `why`.
TransportPeers not_viable(const std::string& why) {
  TransportPeers peers;
  peers.cannot_run = why;
  return peers;
}

TransportPeers connect_one_rank() {
  const std::string unusable = nccl::nccl_gpu_unusable();
  if (!unusable.empty()) return not_viable(unusable);
  nccl::NcclBroadcastGroupOptions options;
  options.bucket_bytes = 1 << 20;  // the suite's parts span several buckets
  nccl::NcclBroadcastGroupFactory groups(options);
  auto id = groups.make_id();
  if (!id.ok()) return not_viable("ncclGetUniqueId failed: " + id.status().message());
  auto group = groups.join(*id, 1, 0, deadline_in(60s));
  if (!group.ok()) return not_viable("one-rank communicator failed: " + group.status().message());
  nccl::BroadcastTransportOptions o;
  o.name = "nccl";
  auto t = nccl::BroadcastTransport::create(std::move(group).value(), o);
  if (!t.ok()) return not_viable("broadcast transport: " + t.status().message());
  nccl::BroadcastTransport* member = t->get();
  TransportPeers peers;
  peers.subscriber = member->reader();
  peers.publisher = std::move(t).value();
  peers.corrupt = [member](uint64_t version, const std::string& part) {
    Status s = member->corrupt_held_part(version, part);
    EXPECT_TRUE(s.ok()) << s.to_string();
  };
  peers.break_publisher = [member] { member->abort("test: the communicator broke"); };
  return peers;
}

INSTANTIATE_TEST_SUITE_P(CudaNccl, TransportConformance,
                         ::testing::Values(TransportBackend{"one_rank", connect_one_rank}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace weightcast::testing
