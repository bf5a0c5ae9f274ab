// The nccl live path (src/endpoint/nccl_live_path.h) under the live-path conformance suite
// (tests/endpoint/live_path_conformance.h), the test playing the coordinator's part of the
// epoch protocol (make_id, join, ready) for a server (NCCL rank 0) and one fetcher:
//   nccl_loopback  on the in-process loopback group (tests/support/loopback_broadcast_group.h):
//                  runs everywhere;
//   nccl_cuda      on real NCCL, both ranks on CUDA device 0: skips with the reason without a
//                  usable GPU and NCCL, or where NCCL refuses two ranks on one GPU.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "src/endpoint/nccl_live_path.h"
#include "tests/endpoint/live_path_conformance.h"
#include "tests/support/loopback_broadcast_group.h"

namespace weightcast::testing {
namespace {

using std::chrono::seconds;

constexpr uint64_t kEpoch = 1;

proto::Envelope stage(proto::NcclStage s, const std::string& group_id = "") {
  proto::Envelope e;
  proto::NcclEpoch& m = *e.mutable_nccl_epoch();
  m.set_stage(s);
  m.set_epoch(kEpoch);
  m.add_ranks(LivePathPair::kServerRank);
  m.add_ranks(LivePathPair::kFetcherRank);
  m.set_publishers(1);
  m.set_group_id(group_id);
  return e;
}

// Rank `rank`'s report of `s`: its group id, or an error saying why it failed.
Result<std::string> report(LivePathPair& pair, uint32_t rank, proto::NcclStage s) {
  auto e = pair.inbox->take(
      rank,
      [&](const proto::Envelope& m) {
        return m.has_nccl_report() && m.nccl_report().stage() == s &&
               m.nccl_report().epoch() == kEpoch;
      },
      std::chrono::milliseconds(30000));
  const std::string what = "rank " + std::to_string(rank) + " " + proto::NcclStage_Name(s);
  if (!e) return deadline_exceeded(what + ": no report within 30 s");
  if (!e->nccl_report().ok()) return failed_precondition(what + ": " + e->nccl_report().reason());
  return e->nccl_report().group_id();
}

// The coordinator's part: the server makes the id, both join, both are told it is ready.
Status form_epoch(LivePathPair& pair) {
  if (!pair.server->on_control_message(stage(proto::NCCL_MAKE_ID))) {
    return internal_error("the server did not take its epoch stage");
  }
  ASSIGN_OR_RETURN(std::string id, report(pair, LivePathPair::kServerRank, proto::NCCL_MAKE_ID));
  if (!pair.fetcher->on_control_message(stage(proto::NCCL_JOIN, id)) ||
      !pair.server->on_control_message(stage(proto::NCCL_JOIN, id))) {
    return internal_error("a side did not take its join");
  }
  for (uint32_t rank : {LivePathPair::kServerRank, LivePathPair::kFetcherRank}) {
    RETURN_IF_ERROR(report(pair, rank, proto::NCCL_JOIN).status());
  }
  pair.server->on_control_message(stage(proto::NCCL_READY));
  pair.fetcher->on_control_message(stage(proto::NCCL_READY));
  return ok_status();
}

LivePathBackend loopback() {
  LivePathBackend b;
  b.name = "nccl_loopback";
  b.path = nccl_live_path(
      [](const proto::NcclConfig&) {
        return Result<std::unique_ptr<nccl::BroadcastGroupFactory>>(
            std::make_unique<nccl::LoopbackBroadcastGroupFactory>());
      },
      {MemoryKind::kHost});
  b.config = live_path_test_config("nccl");
  b.connect = form_epoch;
  return b;
}

LivePathBackend cuda() {
  LivePathBackend b;
  b.name = "nccl_cuda";
  b.path = nccl_live_path();  // make_nccl_groups: NCCL on device 0
  b.config = live_path_test_config("nccl");
  (*b.config.mutable_nccl()->mutable_env())["NCCL_MULTI_RANK_GPU_ENABLE"] = "1";
  b.config.mutable_nccl()->set_bucket_bytes(1 << 20);
  b.connect = form_epoch;
  b.connect_may_fail_here = true;  // two ranks on one GPU: where NCCL allows it
  return b;
}

INSTANTIATE_TEST_SUITE_P(Nccl, LivePathConformance, ::testing::Values(loopback(), cuda()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace weightcast::testing
