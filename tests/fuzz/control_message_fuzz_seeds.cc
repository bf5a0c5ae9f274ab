// Seeds for the control message fuzz target: every body kind with its strings and repeated
// fields filled close to (but within) kControlFuzzLimits, so single mutations cross them.
#include "tests/fuzz/control_message_fuzz_seeds.h"

#include <string>

namespace weightcast::fuzzing {
namespace {

proto::Envelope envelope(uint32_t rank, bool from_coordinator) {
  proto::Envelope m;
  m.set_protocol(kProtocolMax);
  m.set_rank(rank);
  m.set_from_coordinator(from_coordinator);
  return m;
}

void add_checksums(google::protobuf::RepeatedPtrField<proto::TensorChecksum>* out, int n) {
  for (int i = 0; i < n; ++i) {
    proto::TensorChecksum* c = out->Add();
    c->set_name("layers." + std::to_string(i) + ".mlp.weight");
    c->set_checksum(0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1));
  }
}

std::vector<proto::Envelope> every_body_kind() {
  std::vector<proto::Envelope> all;

  proto::Envelope m = envelope(3, false);
  proto::Hello* hello = m.mutable_hello();
  hello->set_protocol_min(kProtocolMin);
  hello->set_protocol_max(kProtocolMax);
  hello->set_role(proto::ROLE_SUBSCRIBER);
  hello->set_rank(3);
  hello->set_holds_version(true);
  hello->set_held_version(41);
  for (const char* t : {"shm", "tcp", "cuda_ipc", "nccl"}) hello->add_transports(t);
  hello->set_host("node-17.cluster.local");
  hello->set_pid(31337);
  hello->set_nonce(0x9E3779B97F4A7C15ull);
  hello->set_held_journal_id("0123456789abcdef0123456789abcdef");
  all.push_back(m);

  m = envelope(0, true);
  proto::Welcome* welcome = m.mutable_welcome();
  welcome->set_protocol(kProtocolMax);
  welcome->set_has_head(true);
  welcome->set_head_version(42);
  welcome->set_committed_version(41);
  welcome->set_has_anchor(true);
  welcome->set_anchor_version(32);
  welcome->add_transports("ucx");
  welcome->add_transports("fs");
  welcome->set_journal_root("/var/lib/weightcast/journal");
  welcome->set_plan("catch_up");
  welcome->set_journal_id("0123456789abcdef0123456789abcdef");
  all.push_back(m);

  m = envelope(0, true);
  m.mutable_refuse()->set_reason("rank 9 is not in the group config");
  m.mutable_refuse()->set_fatal(true);
  all.push_back(m);

  m = envelope(1, false);
  proto::Offer* offer = m.mutable_offer();
  offer->set_version(42);
  offer->set_has_base(true);
  offer->set_base_version(41);
  add_checksums(offer->mutable_checksums(), 7);
  offer->set_stored_bytes(123456789);
  offer->set_published_unix_us(1700000000000000);
  (*offer->mutable_live_descriptors())["ucx"] =
      std::string("WCUB\x01\x00\x00\x00", 8) + std::string(40, '\x07');
  (*offer->mutable_live_descriptors())["nccl"] = std::string("\x08\x03", 2);  // epoch 3
  all.push_back(m);

  // A version two publisher ranks wrote, each serving its parts over ucx.
  m = envelope(1, false);
  m.mutable_offer()->set_version(43);
  for (uint32_t shard : {0u, 1u}) {
    proto::ShardDescriptors* d = m.mutable_offer()->add_shard_descriptors();
    d->set_shard(shard);
    (*d->mutable_live_descriptors())["ucx"] =
        std::string("WCUB\x01\x00\x00\x00", 8) + std::string(24, static_cast<char>(shard));
  }
  all.push_back(m);

  m = envelope(1, false);
  m.mutable_offer()->set_version(32);
  m.mutable_offer()->set_anchor(true);
  m.mutable_offer()->set_journal_id("0123456789abcdef0123456789abcdef");
  add_checksums(m.mutable_offer()->mutable_checksums(), 2);
  all.push_back(m);

  m = envelope(3, false);
  proto::Ack* ack = m.mutable_ack();
  ack->set_version(42);
  ack->set_rank(3);
  ack->set_transport("ucx");
  add_checksums(ack->mutable_checksums(), 3);
  ack->set_apply_us(2500);
  ack->set_bytes_read(1 << 20);
  all.push_back(m);

  m = envelope(3, false);
  proto::Nack* nack = m.mutable_nack();
  nack->set_version(42);
  nack->set_rank(3);
  nack->set_reason("checksum mismatch after apply");
  nack->add_tensors("layers.0.mlp.weight");
  nack->add_tensors("layers.1.mlp.weight");
  all.push_back(m);

  m = envelope(0, true);
  m.mutable_recover()->set_target_version(42);
  m.mutable_recover()->set_from_anchor(true);
  m.mutable_recover()->set_journal_id("0123456789abcdef0123456789abcdef");
  m.mutable_recover()->set_reason("missed v40 (nack)");
  all.push_back(m);

  m = envelope(0, true);
  m.mutable_commit()->set_version(42);
  m.mutable_commit()->set_publish_to_commit_us(830);
  all.push_back(m);

  m = envelope(3, false);
  proto::Heartbeat* heartbeat = m.mutable_heartbeat();
  heartbeat->set_rank(3);
  heartbeat->set_holds_version(true);
  heartbeat->set_held_version(42);
  heartbeat->set_busy(true);
  all.push_back(m);

  m = envelope(3, false);
  m.mutable_leave()->set_rank(3);
  m.mutable_leave()->set_reason("SIGTERM");
  all.push_back(m);

  m = envelope(99, false);
  m.mutable_status_request();
  all.push_back(m);

  m = envelope(0, true);
  proto::StatusReply* reply = m.mutable_status_reply();
  reply->set_group_id("trainer-a");
  reply->set_protocol(kProtocolMax);
  reply->set_has_head(true);
  reply->set_head_version(42);
  reply->set_has_committed(true);
  reply->set_committed_version(41);
  reply->set_versions_in_flight(1);
  for (uint32_t rank = 1; rank <= 3; ++rank) {
    proto::MemberStatus* member = reply->add_members();
    member->set_rank(rank);
    member->set_role(rank == 1 ? proto::ROLE_PUBLISHER : proto::ROLE_SUBSCRIBER);
    member->set_state(rank == 3 ? "catch_up" : "live");
    member->set_holds_version(true);
    member->set_held_version(42 - rank);
    member->set_transport("shm");
    member->set_lag(rank);
    member->set_last_heartbeat_ms_ago(-1 + static_cast<int64_t>(rank) * 250);
    member->set_host("node-" + std::to_string(rank));
    member->set_pid(1000 + rank);
  }
  all.push_back(m);

  m = envelope(0, true);
  proto::NcclEpoch* epoch = m.mutable_nccl_epoch();
  epoch->set_stage(proto::NCCL_JOIN);
  epoch->set_epoch(3);
  for (uint32_t rank : {1u, 2u, 3u}) epoch->add_ranks(rank);
  epoch->set_publishers(1);
  epoch->set_group_id(std::string(128, '\x5a'));
  all.push_back(m);

  m = envelope(2, false);
  proto::NcclReport* report = m.mutable_nccl_report();
  report->set_epoch(3);
  report->set_stage(proto::NCCL_ROUND);
  report->set_version(41);
  report->set_reason("broadcast of bucket 2 timed out");
  all.push_back(m);
  return all;
}

}  // namespace

std::vector<std::vector<uint8_t>> make_control_message_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  for (const proto::Envelope& m : every_body_kind()) {
    const std::string frame = encode_envelope(m);
    seeds.emplace_back(frame.begin(), frame.end());
  }
  return seeds;
}

}  // namespace weightcast::fuzzing
