// The transport interface (transport.h, both halves) over a broadcast group (broadcast_group.h),
// one round (broadcast_round.h) per published version.
//
// Why it exists: it puts the NCCL path under the transport conformance contract
// (tests/transport/transport_conformance.h): every member makes one BroadcastTransport; the
// root publishes, the others read what arrived. Production does NOT use it (hence tests/):
// the rank group's live path drives rounds from the coordinator's offers (run_round on every
// member when a version is offered), so no member, and no GPU kernel, waits idle in a
// collective between versions as this receive loop does.
//
// Roles, fixed by the member's rank:
//  * the root (options.root) publishes: one round per publish(), all or nothing; versions
//    increase (kFailedPrecondition otherwise); a failed round breaks the group for good
//    (StickyError: the later calls return kUnavailable). It holds the rounds it publishes only
//    when the group has one member (it is then also the subscriber: see reader()).
//  * every other member runs a receive thread: run_round in a loop, each with the idle
//    deadline (no round for that long ends the loop and breaks the group: the epoch is over),
//    keeping the last keep_versions rounds in host memory. A round with a corrupt part is
//    dropped (the loop goes on); any other failure, or three failed rounds in a row, ends it
//    (receive_status()).
// Reads (latest, describe, fetch) answer from the rounds held now; they wait, up to their
// deadline, only for a round already under way (its header arrived), so that a read after the
// root's publish() returned sees that version. fetch verifies the held bytes' XXH3.
// Destruction aborts the group (so the receive thread returns at once) and joins the thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "transport/nccl/broadcast_group.h"
#include "transport/nccl/broadcast_round.h"
#include "transport/transport.h"

namespace weightcast::nccl {

struct BroadcastTransportOptions {
  int root = 0;                // the publishing member's rank
  uint32_t keep_versions = 4;  // rounds held per member (at least 1)
  std::chrono::milliseconds idle_deadline = std::chrono::minutes(10);
  RoundLimits limits;
  std::string name = "nccl";  // info().name: "nccl", or "loopback" over the loopback group
};

class HeldRounds;  // the rounds a member holds (broadcast_transport.cc)

// Both halves of the transport interface on one member: the root publishes, every member
// reads what it holds.
class BroadcastTransport final : public PartPublisher, public PartReader {
 public:
  // Takes this member's end of the group; on a non-root member starts the receive thread.
  [[nodiscard]] static Result<std::unique_ptr<BroadcastTransport>> create(
      std::unique_ptr<BroadcastGroup> group, BroadcastTransportOptions options);
  ~BroadcastTransport() override;
  BroadcastTransport(const BroadcastTransport&) = delete;
  BroadcastTransport& operator=(const BroadcastTransport&) = delete;

  TransportInfo info() const override;
  Status publish(uint64_t version, std::span<const PartPayload> parts, Deadline deadline) override;
  Result<VersionDescriptor> latest(Deadline deadline) override;
  Result<VersionDescriptor> describe(uint64_t version, Deadline deadline) override;
  Status fetch(uint64_t version, const PartDescriptor& part, std::span<uint8_t> dest,
               Deadline deadline) override;

  // A second reader of this member's held rounds: the subscriber of a one-member group in a
  // test that wants the two halves as separate objects. It may outlive this object (it keeps
  // what was held).
  std::unique_ptr<PartReader> reader() const;

  // Ok while the receive loop runs (and always on the root); after, the error that ended it.
  Status receive_status() const;
  // Rounds the receive loop dropped because a part did not verify.
  uint64_t dropped_rounds() const;

  // Breaks the group now (every member's calls fail): for tests and shutdown paths.
  void abort(const std::string& why);
  // Tests: flips one byte of a held part, so that fetch reports kDataLoss.
  [[nodiscard]] Status corrupt_held_part(uint64_t version, const std::string& part);

 private:
  BroadcastTransport(std::unique_ptr<BroadcastGroup> group, BroadcastTransportOptions options);
  void receive_loop();

  std::unique_ptr<BroadcastGroup> group_;
  const BroadcastTransportOptions options_;
  std::shared_ptr<HeldRounds> held_;
  StickyError sticky_;
  bool published_ = false;
  uint64_t last_published_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread receiver_;
};

}  // namespace weightcast::nccl
